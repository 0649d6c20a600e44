"""`hardware-selector db ...` and the calibration line of `plan`."""

from __future__ import annotations

import json

import pytest

from benchmarks_db.record import spec_hash
from benchmarks_db.store import BenchmarkStore
from hardware_selector_cli.app import main
from planner.models.resolve import resolve_model
from planner.units import format_seconds
from tests.db_samples import calibrating_store, sample_record

PLAN = [
    "plan",
    "--model",
    "gpt2",
    "--gpu",
    "cpu",
    "--gpus-per-node",
    "2",
    "--seq-len",
    "128",
    "--strategies",
    "ddp",
    "--precision",
    "fp32",
]


def _filled(tmp_path) -> BenchmarkStore:
    store = calibrating_store(tmp_path / "runs.duckdb")
    store.add(sample_record(status="oom", step_time_median_s=None, error="out of memory", strategy="fsdp-full"))
    return store


def test_list_show_export_import_and_calibration(tmp_path, capsys):
    store = _filled(tmp_path)
    db = ["--db", str(store.path)]
    assert main(["db", "list", *db, "--status", "ok"]) == 0
    out = capsys.readouterr().out
    assert "3 runs in" in out and out.count("2×cpu") == 3
    first = store.runs()[0]
    assert main(["db", "show", first.id[:8], *db]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["id"] == first.id and shown["config"]["micro_batch"] == first.micro_batch

    assert main(["db", "calibration", *db, "--plot", str(tmp_path / "cal.html")]) == 0
    out = capsys.readouterr().out
    assert "correction ddp on cpu: 10 ms + x4 (3 records, newest " in out
    assert "mean |error|" in out and "0% after calibration" in out
    page = (tmp_path / "cal.html").read_text()
    assert page.count("<circle") == 6 and "ddp x2" in page  # predicted and calibrated per record
    _the_ticks_read_the_points_positions(page, store)

    exported = tmp_path / "share.parquet"
    assert main(["db", "export", str(exported), *db]) == 0
    other = ["--db", str(tmp_path / "other.duckdb")]
    assert main(["db", "import", str(exported), *other]) == 0
    assert "imported 4 of 4 rows" in capsys.readouterr().out
    # An audit: `--limit 3` titled "3 runs in DB" where it held 4, one run read "1 runs", and an import whose every
    # row was bad exited 0.
    assert main(["db", "list", *db, "--limit", "3"]) == 0
    assert "the newest 3 of 4 runs in" in " ".join(capsys.readouterr().out.split())
    assert main(["db", "list", *db, "--limit", "2", "--status", "ok"]) == 0  # of those the filters match
    assert "the newest 2 of 3 runs in" in " ".join(capsys.readouterr().out.split())
    assert main(["db", "list", *db, "--status", "oom"]) == 0
    assert "1 run in" in " ".join(capsys.readouterr().out.split())
    broken = tmp_path / "broken.csv"
    assert main(["db", "export", str(broken), *db]) == 0
    rows = broken.read_text().splitlines()
    header = rows[0].split(",")
    column = header.index("gpu_count")
    bad = [",".join("0" if i == column else cell for i, cell in enumerate(row.split(","))) for row in rows[1:2]]
    broken.write_text("\n".join([rows[0], *bad]) + "\n")
    assert main(["db", "import", str(broken), "--db", str(tmp_path / "third.duckdb")]) == 1
    assert "imported 0 of 1 rows" in capsys.readouterr().out


def test_db_errors_are_one_line(tmp_path, capsys):
    db = ["--db", str(tmp_path / "empty.duckdb")]
    assert main(["db", "show", "abc", *db]) == 2
    assert main(["db", "import", str(tmp_path / "missing.csv"), *db]) == 2
    assert main(["db", "calibration", *db, "--plot", str(tmp_path / "x.svg")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "no run with id 'abc'" in err[0] and "no such file" in err[1] and ".png or .html" in err[2]
    assert main(["db", "show", "", *db]) == 2  # a required argument is not advised to be left out (an audit)
    assert capsys.readouterr().err.strip() == "error: RUN_ID is empty; give it a value"


def test_plan_says_how_it_was_calibrated_and_uses_a_measured_record(tmp_path, capsys):
    store = _filled(tmp_path)
    assert main([*PLAN, "--db", str(tmp_path / "absent.duckdb")]) == 0
    assert "throughput not calibrated: no benchmark database" in capsys.readouterr().out

    assert main([*PLAN, "--db", str(store.path), "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["calibration"].startswith("calibrated on 3 measured runs for cpu")
    assert best["throughput"]["sources"]["step_time_s"].startswith("calibration: ddp on cpu: 10 ms + x4")

    # Measure the best config itself: the plan now quotes the record.
    config = json.dumps(best["config"])
    measured = sample_record(
        model_name="gpt2",
        model_spec_hash=spec_hash(resolve_model("gpt2")),
        tiny=False,
        config_json=config,
        micro_batch=best["config"]["micro_batch"],
        grad_accum=best["config"]["grad_accum"],  # the columns say what ran (RunRecord.config reads them)
        seq_len=128,
        step_time_median_s=best["throughput"]["step_time_s"] / 2,
        predicted_step_time_s=None,
    )
    store.add(measured)
    assert main([*PLAN, "--db", str(store.path), "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["throughput"]["sources"]["step_time_s"] == (
        f"measured: benchmark record {measured.id[:8]} ({measured.created_at:%Y-%m-%d})"
    )
    assert main([*PLAN, "--db", str(store.path), "--no-calibration"]) == 0
    assert "throughput not calibrated (--no-calibration)" in capsys.readouterr().out


def test_plan_with_only_an_out_of_range_correction_says_it_is_not_calibrated_and_why(tmp_path, capsys):
    """Audit: records predicted at 2-8 s fit a ddp correction; the plan's predicted step (~7,000 s) is more than a
    decade beyond, so no figure of it changed, yet `plan` said "calibrated on 3 measured runs". The reference
    for what changed is the best plan's own step-time source (formula) and the note the correction left."""
    store = BenchmarkStore(tmp_path / "runs.duckdb")
    store.add_many([sample_record(micro_batch=mb, predicted_step_time_s=2.0 * mb, step_time_median_s=0.01 + 4.0 * mb)
                    for mb in (1, 2, 4)])  # fmt: skip
    assert main([*PLAN, "--db", str(store.path), "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["throughput"]["sources"]["step_time_s"].startswith("formula:")
    (note,) = [note for note in best["throughput"]["notes"] if note.startswith("calibration not applied: ")]
    step = best["throughput"]["step_time_s"]
    assert best["calibration"] == "not calibrated: " + note.removeprefix("calibration not applied: ")
    assert best["calibration"].startswith("not calibrated: the correction ddp on cpu: 10 ms + x2 (3 records")
    assert best["calibration"].endswith(
        f"was fitted on predicted steps of 2 s-8 s; this plan's {format_seconds(step)} is more than 10x outside that range"
    )
    assert main([*PLAN, "--db", str(store.path)]) == 0
    printed = " ".join(capsys.readouterr().out.split())  # rich wraps the line
    assert "throughput not calibrated: the correction ddp on cpu" in printed
    assert "calibrated on 3" not in printed


def test_a_limit_out_of_range_is_one_line(tmp_path, capsys):
    db = ["--db", str(tmp_path / "empty.duckdb")]
    for limit in ("-1", "0", "1e20"):
        assert main(["db", "list", "--limit", limit, *db]) == 2, limit
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("error: Invalid value for '--limit'") for line in err), err


def test_importing_a_csv_without_a_column_its_rows_need_names_it_and_writes_nothing(tmp_path, capsys):
    """A CSV whose ok runs lack step_time_median_s (or whose failed runs lack error) once reported "imported 0 of
    1 rows" and exit 0. Every column the file needs is named, exit 2, one line, and no database is written; the
    same file with the column imports every row (the reference)."""
    import csv

    source = BenchmarkStore(tmp_path / "source.duckdb")
    source.add_many([sample_record(), sample_record(status="oom", step_time_median_s=None, error="CUDA out of memory")])
    exported = tmp_path / "runs.csv"
    assert main(["db", "export", str(exported), "--db", str(source.path)]) == 0
    with exported.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for column, status in (("step_time_median_s", "'ok'"), ("error", "'oom'")):
        lacking = tmp_path / f"no-{column}.csv"
        with lacking.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=[name for name in rows[0] if name != column])
            writer.writeheader()
            writer.writerows({key: value for key, value in row.items() if key != column} for row in rows)
        target = tmp_path / f"{column}.duckdb"
        capsys.readouterr()
        assert main(["db", "import", str(lacking), "--db", str(target)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (
            f"error: {lacking}: rejected, it lacks the column {column}, which its rows of status {status} need; "
            "export files with `hardware-selector db export`"
        )
        assert not target.exists()
    assert main(["db", "import", str(exported), "--db", str(tmp_path / "whole.duckdb")]) == 0
    assert "imported 2 of 2 rows" in capsys.readouterr().out


def test_a_list_filter_no_run_could_ever_match_names_the_valid_values(tmp_path, capsys):
    """`db list --status bogus` once printed "0 runs", which reads as "none recorded yet"."""
    store = _filled(tmp_path)
    db = ["--db", str(store.path)]
    for flag, value, message in (
        ("--status", "bogus", "--status bogus: a run's status is one of ok, oom, error, timeout"),
        ("--strategy", "zero9", "--strategy zero9: recorded strategies are ddp, fsdp, deepspeed, engine, fsdp-full|"),
        ("--gpu", "Z900", "--gpu: unknown GPU 'Z900'"),
    ):
        assert main(["db", "list", *db, flag, value]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {message}") and "\n" not in err, err
    # Values that could match stay a count, even of none; a GPU is found by any of its catalog spellings.
    for flag, value, count in (
        ("--status", "TIMEOUT", 0),
        ("--strategy", "fsdp-full", 1),
        ("--gpu", "CPU", 4),
        ("--strategy", "fsdp", 1),
    ):  # a family takes its variants (it listed none: an audit)
        assert main(["db", "list", *db, flag, value]) == 0
        assert f"{count} {'run' if count == 1 else 'runs'} in" in capsys.readouterr().out


def test_export_over_an_existing_file_needs_force_and_replaces_it_whole(tmp_path, capsys):
    store = _filled(tmp_path)
    mine = tmp_path / "mine.csv"
    mine.write_text("my own table\n")
    assert main(["db", "export", str(mine), "--db", str(store.path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {mine} exists; pass --force to replace it, or choose another file name"
    assert mine.read_text() == "my own table\n"  # untouched
    (tmp_path / "folder.csv").mkdir()
    assert main(["db", "export", str(tmp_path / "folder.csv"), "--db", str(store.path), "--force"]) == 2
    assert "folder.csv is a folder; give the export a file name ending in .parquet or .csv" in capsys.readouterr().err
    # an import from a folder, or from an empty path ('.'), said "no such file" of a folder that is there
    assert main(["db", "import", str(tmp_path / "folder.csv"), "--db", str(store.path)]) == 2
    assert "folder.csv is a folder; import a .parquet or .csv file" in capsys.readouterr().err
    assert main(["db", "export", str(mine), "--db", str(store.path), "--force"]) == 0
    assert mine.read_text().startswith("id,") and [p.name for p in tmp_path.iterdir() if "mine" in p.name] == [
        "mine.csv"
    ]  # replaced whole: no temporary left beside it


def test_a_plot_path_that_cannot_be_written_is_refused_before_anything_is_printed(tmp_path, capsys):
    """The table and the corrections were printed, and only then "cannot write": the path is checked first."""
    store = _filled(tmp_path)
    (tmp_path / "a-file").write_text("")
    (tmp_path / "folder.html").mkdir()
    for plot, reason in (
        (tmp_path / "a-file" / "deeper" / "cal.html", f"{tmp_path / 'a-file'} is a file, not a folder"),
        (tmp_path / "folder.html", "it is a folder; name a file"),
    ):
        assert main(["db", "calibration", "--db", str(store.path), "--plot", str(plot)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith(f"error: --plot: cannot write {plot}: {reason}") and err.count("\n") == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "a-file",
        "folder.html",
        "runs.duckdb",
        "runs.duckdb.gpus.json",  # the store's GPU index (benchmarks_db/gpu_index.py), written with the records
        "runs.duckdb.lock",
    ]


def test_calibration_with_nothing_to_compare_says_why_and_what_records_a_run(tmp_path, capsys):
    """It printed "0 measured runs with predictions" over an empty table, for an empty database and for one
    whose runs (CPU processes: recorded without a prediction) it could not compare alike."""
    empty = tmp_path / "empty.duckdb"
    assert main(["db", "calibration", "--db", str(empty)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        out.startswith(f"no measured runs in {empty}: nothing to calibrate yet;") and "hardware-selector train" in out
    )
    # `db list` says the same of a database that is not there (it printed an empty table under "0 runs in").
    assert main(["db", "list", "--db", str(empty)]) == 0
    listed = " ".join(capsys.readouterr().out.split())
    assert listed.startswith(f"no benchmark database at {empty}: nothing recorded yet;") and out.endswith(
        listed.split("nothing recorded yet; ")[1]
    )
    store = BenchmarkStore(tmp_path / "cpu.duckdb")
    store.add_many(
        [sample_record(predicted_step_time_s=None), sample_record(micro_batch=2, predicted_step_time_s=None)]
    )
    assert main(["db", "calibration", "--db", str(store.path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"2 runs in {store.path}, none to compare: 2 carry no predicted step time" in out
    assert "┃" not in out and "predicted calibrated measured" not in out  # no empty table
    plot = tmp_path / "calib.html"
    assert main(["db", "calibration", "--db", str(store.path), "--plot", str(plot)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"no plot written to {plot}: it would be empty" in out and not plot.exists()
    filled = _filled(tmp_path)
    assert main(["db", "calibration", "--db", str(filled.path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"3 of 4 measured runs in {filled.path} carry a predicted step time" in out and "in-sample: the" in out


def test_a_run_recorded_by_train_carries_its_predicted_rate_and_db_list_shows_it(tmp_path, capsys):
    """Found by an audit: `db list`'s "predicted" column read "-" for every run `train` recorded (tune's showed
    a rate): the runner's record set the predicted step time but never the predicted tokens/s the column reads.
    Reference: the run's tokens per step over the predicted step time, which is what the plan's rate means."""
    from backends.runner.summary import record, step_time_comparable
    from planner.evaluate import evaluate
    from planner.rundir.run_options import run_config
    from tests.emit_plans import make_plan

    plan = make_plan("gpt2", gpus_per_node=2, strategy="ddp", seq_len=32, micro_batch=1, grad_accum=2)
    plan = plan.model_copy(update={"throughput": evaluate(plan.model, plan.config, plan.cluster).throughput})
    run = run_config(plan)
    assert step_time_comparable(plan, run, tiny=False)  # the plan's own step on the `cpu` pseudo-GPU
    measured = 2 * run.predicted.step_time_s  # slower than predicted, as CPU runs are: an MFU within (0, 1]
    summary = {
        "median_step_time_s": measured,
        "step_time_spread_s": 0.01,
        "steps": 6,
        "tokens_per_s": run.tokens_per_step / measured,
        "peak_memory_per_rank_bytes": None,
        "tiny": False,
        "comparable_to_prediction": False,
        "step_time_comparable": True,
    }
    record_id = record(plan, "ddp", run, summary, db=tmp_path / "runs.duckdb")
    (stored,) = BenchmarkStore(tmp_path / "runs.duckdb").runs()
    assert stored.id == record_id
    reference = run.tokens_per_step / run.predicted.step_time_s
    assert stored.predicted_tokens_per_s == pytest.approx(reference)
    assert main(["db", "list", "--db", str(tmp_path / "runs.duckdb")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if record_id[:8] in line)
    assert row.split()[-1] == f"{reference:,.0f}"  # the last column, "predicted"


def _the_ticks_read_the_points_positions(page: str, store) -> None:
    """The log-log scatter had no axis values. Each record's measured step, read off the x axis's marks by log
    interpolation between the two outermost, is where its circles stand: the marks are the points' own scale."""
    import math
    import re

    ticks = [(float(x), float(value)) for x, value in re.findall(r'class="tick-x" x="([\d.]+)"[^>]*>([^<]+)<', page)]
    assert len(ticks) >= 3 and ticks == sorted(ticks) and len({value for _, value in ticks}) == len(ticks)
    (x0, v0), (x1, v1) = ticks[0], ticks[-1]
    circles = [float(cx) for cx in re.findall(r'<circle cx="([\d.]+)"', page)]
    measured = [run for run in store.runs() if run.step_time_median_s is not None and run.predicted_step_time_s]
    assert len(measured) == 3
    for run in measured:
        share = math.log10(run.step_time_median_s / v0) / math.log10(v1 / v0)
        assert min(abs(cx - (x0 + share * (x1 - x0))) for cx in circles) < 0.3, run.step_time_median_s
    assert len(re.findall(r'class="tick-y"', page)) == len(ticks)


def test_a_run_with_another_strategy_than_the_plans_is_not_compared_nor_recorded_beside_its_prediction():
    """Found by a new user's audit (2026-11-30): `train RUN_DIR --strategy engine` on a DeepSpeed ZeRO-3 folder
    printed "measured 0.111 s/step vs predicted 6.67 s/step (-98%)" and recorded the engine's run beside the
    DeepSpeed prediction, which calibrated the next plans. Another strategy is another step, as another
    process count is: said, not compared."""
    from backends.runner.summary import _other_shape, step_time_comparable
    from planner.rundir.run_options import run_config
    from tests.emit_plans import make_plan

    plan = make_plan("gpt2", gpus_per_node=2, strategy="deepspeed", zero_stage=3, seq_len=32, micro_batch=1)
    run = run_config(plan)
    assert step_time_comparable(plan, run, tiny=False, strategy="deepspeed")
    assert not step_time_comparable(plan, run, tiny=False, strategy="engine")
    assert _other_shape(plan, run, "engine") == "run with engine, the plan predicts deepspeed"
