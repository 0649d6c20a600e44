"""tune's search is calibrated as `plan`'s is, and its winner's plan.json holds the step its trial measured
(hardware_selector_cli/tune_calibration.py; docs/running.md, "tune"). Trials are stood in for by
`each_trial_ran` (1 s a step)."""

from __future__ import annotations

import json

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
