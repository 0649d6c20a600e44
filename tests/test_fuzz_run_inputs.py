"""The fuzz campaign of tests/test_fuzz_inputs.py, over what users hand to `train` and `db import`.

- A run folder's plan.json with any field of its run contract replaced by a
  nasty value (negative, zero, huge, fractional, a string, null, a list):
  `train --dry-run` either accepts it (exit 0, the torchrun command) or says
  what is wrong in one line with exit 2, never a traceback.
- A CSV of benchmark runs with nasty values in its measured columns:
  `db import` imports the good rows and counts the bad ones (exit 0), and the
  database still plans afterwards with every number finite.
The reference for "accepted" is the run contract's own validation
(planner/contract/run_config.py) and the record's (benchmarks_db/record.py).
"""

from __future__ import annotations

import csv
import json
import re
import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks_db.store import BenchmarkStore
from benchmarks_db.transfer import export_runs
from hardware_selector_cli.app import main
from planner.rundir.write import emit_run_folder
from tests.db_samples import sample_record
from tests.emit_plans import make_plan
from tests.test_fuzz_inputs import PROFILE, _check, guard

JSON_NASTY = st.sampled_from(
    [None, -1, 0, 1, 2.5, 1e308, 10**40, "x", "", True, [], {}, [1, 2], {"a": 1}, float("nan")]
)
RUN_FIELDS = [
    ("run", "nproc_per_node"),
    ("run", "num_nodes"),
    ("run", "micro_batch"),
    ("run", "grad_accum"),
    ("run", "seq_len"),
    ("run", "precision"),
    ("run", "device"),
    ("run", "launcher"),
    ("run", "model", "name"),
    ("run", "model", "init"),
    ("run", "model", "task"),
    ("run", "data", "train"),
    ("run", "data", "eval_fraction"),
    ("run", "optim", "learning_rate"),
    ("run", "optim", "betas"),
    ("run", "optim", "warmup_steps"),
    ("run", "optim", "max_steps"),
    ("run", "optim", "epochs"),
    ("run", "checkpoint", "every"),
    ("run", "checkpoint", "keep_last"),
    ("config", "global_batch"),
    ("config", "strategy"),
    ("config", "zero_stage"),
    ("cluster", "gpus_per_node"),
    ("schema_version",),
]


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz-run") / "run"
    emit_run_folder(make_plan(strategy="ddp"), folder)
    # The folder as emitted trains; this first call, outside any example's guard, also pays the imports a dry
    # run makes once per process (the model's config classes: tens of seconds on a loaded machine, past the
    # guard's 30 s that is meant to catch a hang).
    assert main(["train", str(folder), "--dry-run"]) == 0
    return folder


@PROFILE
@given(edits=st.lists(st.tuples(st.sampled_from(RUN_FIELDS), JSON_NASTY), min_size=1, max_size=3))
def test_a_hand_edited_plan_json_trains_or_is_refused_in_one_line(capsys, tmp_path_factory, emitted, edits):
    folder = tmp_path_factory.mktemp("edited") / "run"
    shutil.copytree(emitted, folder)
    document = json.loads((folder / "plan.json").read_text())
    for path, value in edits:
        *parents, key = path
        holder = document
        for name in parents:
            holder = holder[name]
        holder[key] = value
    (folder / "plan.json").write_text(json.dumps(document))
    with guard():
        code = main(["train", str(folder), "--dry-run"])
    out, err = capsys.readouterr()
    if code == 0:
        assert "torch.distributed.run" in out, out
    else:
        assert code == 2, (edits, code, err[-2000:])
        assert err.startswith("error:") and err.strip().count("\n") == 0, (edits, err)


CSV_NASTY = st.sampled_from(["inf", "-inf", "nan", "1e308", "-1", "0", "abc", "", "1e-320", "3", "0.5"])
MEASURED = [
    "step_time_median_s",
    "tokens_per_s",
    "predicted_peak_memory_bytes",
    "predicted_step_time_s",
    "mfu",
    "tflops_per_gpu",
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    source = BenchmarkStore(tmp_path_factory.mktemp("fuzz-db") / "source.duckdb")
    source.add_many([sample_record(), sample_record(), sample_record()])
    path = source.path.parent / "runs.csv"
    export_runs(source, path)
    return list(csv.DictReader(path.open()))


@pytest.mark.slow
@PROFILE
@given(edits=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(MEASURED), CSV_NASTY), min_size=1, max_size=4))
def test_db_import_keeps_the_good_rows_and_the_database_still_plans(capsys, tmp_path_factory, exported, edits):
    rows = [dict(row) for row in exported]
    assert set(MEASURED) <= set(rows[0])
    for index, column, value in edits:
        rows[index][column] = value
    folder = tmp_path_factory.mktemp("import")
    with (folder / "runs.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    database = folder / "target.duckdb"
    with guard():
        code = main(["db", "import", str(folder / "runs.csv"), "--db", str(database)])
    out, err = capsys.readouterr()
    if code == 2:
        assert err.startswith("error:") and err.strip().count("\n") == 0, (edits, err)
        return
    imported = int(out.split()[1])
    bad = int(out.rsplit("(", 1)[1].split(",")[1].split()[0])
    assert imported + bad == 3, out
    assert code == (1 if bad == 3 else 0), (code, out)  # an import whose every row is bad says so by its exit
    assert imported == len(BenchmarkStore(database).runs())
    _check(capsys, ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "128", "--json",
                    "--db", str(database)])  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--no-resume", "--resume-from", "ckpt"], "--resume-from resumes a checkpoint and --no-resume starts afresh"),
        (["--trainer", "--strategy", "engine"], "--trainer runs DDP, FSDP or DeepSpeed"),
        (["--no-resume", "--reset-data-position"], "--reset-data-position is for the runner's resume"),
        (["--trainer", "--reset-data-position"], "--trainer resumes through the Trainer's own state"),
        (["--steps-only", "--eval-every", "5"], "--eval-every: --steps-only trains and times the steps"),
        (["--steps-only", "--save-every", "10"], "--save-every: --steps-only"),
        (["--no-record", "--db", "bench.duckdb"], "--db names the database a run records into"),
        (["--tiny", "--record", "--db", "bench.duckdb"], "--tiny runs record nothing"),
    ],
)
def test_runner_flags_of_which_one_would_be_dropped_are_one_line(flags, message):
    """Each pair was taken, the second flag dropped without a word (train --dry-run printed the torchrun
    command); a tune's trial (--steps-only --save-every 0 --no-resume --no-record) stays accepted."""
    from backends.runner.options import parse_args
    from planner.errors import UserInputError

    with pytest.raises(UserInputError, match=re.escape(message)):
        parse_args(["--plan", "run", *flags])
    trial = ["--plan", "run", "--steps-only", "--save-every", "0", "--no-resume", "--no-record", "--tiny"]
    assert parse_args(trial).steps_only
