"""tune's search is calibrated as `plan`'s is, and its winner's plan.json holds the step its trial measured
(hardware_selector_cli/tune_calibration.py; docs/running.md, "tune"). Trials are stood in for by
`each_trial_ran` (1 s a step)."""

from __future__ import annotations

import json

import pytest
from distributed import cli_in_process
from test_tune_run_folder import each_trial_ran

PLAN = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "32", "--global-batch", "4"]


def _step(run_dir) -> tuple[float, str]:
    throughput = json.loads((run_dir / "plan.json").read_text())["throughput"]
    return throughput["step_time_s"], throughput["sources"]["step_time_s"]


def test_the_winner_is_timed_by_its_trial_and_the_next_tune_predicts_with_it(tmp_path, monkeypatch):
    """Found by a new user's audit: tune searched without the database's records, so `plan` said "measured:
    benchmark record ..." of a plan tune predicted from the formula, and the winner's plan.json kept the formula's
    step after tune had measured it, so the next `train` compared against a number already known wrong."""
    from benchmarks.harness import processes

    monkeypatch.setattr(processes, "run_torchrun_command", each_trial_ran)
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(tmp_path / "db.duckdb"))
    run_dir = tmp_path / "run"
    assert cli_in_process(*PLAN, "--strategies", "ddp", "--emit", run_dir).returncode == 0
    assert _step(run_dir)[1].startswith("formula")
    first = cli_in_process("tune", run_dir, "--candidates", "1", "--budget", "5")
    assert first.returncode == 0, first.stderr
    # The table's columns each have their legend; peak says which memory it is (host RSS: CPU trials).
    assert "peak: a rank's highest memory in the trial (host peak RSS: these trials ran on CPU)" in first.stdout
    assert "launch s: the trial's share of its launch's start-up" in first.stdout
    step, source = _step(run_dir)
    assert step == 1.0 and source.startswith("measured: benchmark"), (step, source)
    again = cli_in_process("tune", run_dir, "--candidates", "1", "--budget", "5", "--remeasure")
    assert again.returncode == 0, again.stderr
    assert "throughput calibrated on" in again.stdout
    row = next(line for line in again.stdout.splitlines() if "DDP" in line)
    assert " 1 " in row.replace("│", " ").replace("┃", " "), row  # pred is the record's 1 s, as plan says it
    plain = cli_in_process("tune", run_dir, "--candidates", "1", "--budget", "5", "--remeasure", "--no-calibration")
    assert plain.returncode == 0, plain.stderr
    assert "throughput not calibrated (--no-calibration)" in plain.stdout
    assert _step(run_dir)[1].startswith("formula")


def test_a_tune_that_creates_the_database_says_its_winner_is_calibrated_by_its_trials(tmp_path, monkeypatch):
    """Found after the closed loop's first runs: a tune on a fresh database printed "throughput not calibrated: no
    benchmark database at ..." under a table saying "recorded in" that very database, and its winner's plan.json
    held its trial's measured step. The line with the measured order is read after the trials are stored; the
    search's own line, said before them, is printed beside it as what `pred` rests on."""
    from benchmarks.harness import processes

    monkeypatch.setattr(processes, "run_torchrun_command", each_trial_ran)
    db = tmp_path / "db.duckdb"
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(db))
    run_dir = tmp_path / "run"
    assert cli_in_process(*PLAN, "--strategies", "ddp", "--emit", run_dir).returncode == 0
    assert not db.exists()
    tuned = cli_in_process("tune", run_dir, "--candidates", "1", "--budget", "5")
    assert tuned.returncode == 0, tuned.stderr
    lines = tuned.stdout.splitlines()
    said = next(line for line in lines if line.startswith("throughput "))
    # One DDP trial, one record, the winner's own: its measured step (1 s, _step) is what the line stands on.
    assert said.startswith("throughput calibrated on 1 measured run for cpu (1 used in corrections: ddp on cpu: "), said
    assert (
        f"pred was predicted before these trials were records: not calibrated: no benchmark database at {db}"
        in (lines)[lines.index(said) - 1]
    )
    step, source = _step(run_dir)
    assert step == 1.0 and source.startswith("measured: benchmark"), (step, source)
    # With the database as the trials left it, the search already said what the trials did: one line.
    again = cli_in_process("tune", run_dir, "--candidates", "1", "--budget", "5")
    assert again.returncode == 0, again.stderr
    assert "pred was predicted before" not in again.stdout
    assert "throughput calibrated on 1 measured run for cpu" in again.stdout


def test_an_elastic_folders_fallbacks_are_calibrated_by_the_trials_as_its_ranking_is(tmp_path, monkeypatch):
    """Found after the closed loop's first runs: tune RUN_DIR of an --elastic folder ranked its plans by the
    calibrated steps, but re-planned the fallbacks for the other node counts by the formula alone, and the winner's
    own count kept the search's step though its trial was a record. The reference, by hand: one DDP trial on one
    node of 2 ranks measured 1.25 x the formula's p; the 2-node fallback's formula step f (evaluate(), the
    formula itself) is corrected to f x 1.25, the family's ratio."""
    from benchmarks.harness import processes
    from benchmarks_db.store import BenchmarkStore
    from planner.elastic_plan import ElasticPlan
    from planner.evaluate import evaluate
    from planner.rundir.plan_file import read_plan_file

    monkeypatch.setattr(processes, "run_torchrun_command", _slower_than_predicted)
    db = tmp_path / "db.duckdb"
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(db))
    run_dir = tmp_path / "run"
    # A batch whose 2-node step (its all-reduce crosses the slow inter-node link) is within a decade of the 1-node
    # step the trial measured: the correction is carried that far (planner/calibration.py, EXTRAPOLATION_LIMIT).
    emitted = cli_in_process("plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "128",
                             "--global-batch", "64", "--strategies", "ddp", "--elastic", "1:2", "--emit", run_dir)  # fmt: skip
    assert emitted.returncode == 0, emitted.stderr
    tuned = cli_in_process("tune", run_dir, "--candidates", "1", "--budget", "60")
    assert tuned.returncode == 0, tuned.stderr
    (record,) = BenchmarkStore(db).runs()
    ratio = record.step_time_median_s / record.predicted_step_time_s  # the trial's step over the formula's
    assert ratio == pytest.approx(SLOWER)

    plan, _ = read_plan_file(run_dir)
    table = ElasticPlan.model_validate(json.loads((run_dir / "plan.json").read_text())["elastic"])
    one, two = table.fallbacks
    assert one.throughput.step_time_s == record.step_time_median_s  # the winner's own count: its trial
    assert one.throughput.sources["step_time_s"].startswith("measured: benchmark record")
    fallback = two.plan(plan)
    formula = evaluate(plan.model, fallback.config, fallback.cluster).throughput.step_time_s
    assert two.throughput.step_time_s == pytest.approx(formula * ratio)
    assert two.throughput.sources["step_time_s"].startswith(f"calibration: ddp on cpu: x{ratio:.3g} (1 record: ")


SLOWER = 1.25


def _slower_than_predicted(target, nproc, timeout_s, launcher="torchrun"):
    """Stands in for the trials' launch: every trial runs 1.25x slower than its plan.json predicted."""
    from pathlib import Path

    from test_tune import write_trial

    from planner.rundir.trial import REQUEST_FILE, TrialRequest

    for folder in map(Path, target[2:]):
        throughput = json.loads((folder / "plan.json").read_text())["throughput"]
        predicted = throughput.get("formula_step_time_s") or throughput["step_time_s"]
        request = TrialRequest.model_validate_json((folder / REQUEST_FILE).read_text())
        write_trial(folder, request, SLOWER * predicted, nproc)
    return 0, ""
