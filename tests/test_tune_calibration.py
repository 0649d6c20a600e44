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
