"""`tune --remeasure` measures every trial again; without it a repeated tune reads its trials back from the
database (a stopped tune resumes). `tune --emit DIR --force` replaces an existing DIR, as its refusal says.

The trials' launch is a stand-in writing a fixed step time per launch (the reference: which trials ran, and
which records the winner's plan.json names), through the CLI in this process.
"""

from __future__ import annotations

import json
from pathlib import Path

from distributed import cli_in_process
from test_tune import write_trial

from benchmarks_db.store import BenchmarkStore
from planner.rundir.trial import REQUEST_FILE, TrialRequest

TUNE = ["tune", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "32", "--global-batch", "8",
        "--strategies", "ddp,fsdp", "--candidates", "2", "--budget", "5", "--tiny"]  # fmt: skip


def test_remeasure_runs_every_trial_again_and_the_winner_names_the_new_records(tmp_path, monkeypatch):
    from benchmarks.harness import processes

    launched: list[list[str]] = []

    def launch(target, nproc, timeout_s, launcher="torchrun"):
        launched.append([])
        for folder in map(Path, target[2:]):
            request = TrialRequest.model_validate_json((folder / REQUEST_FILE).read_text())
            launched[-1].append(request.key)
            write_trial(folder, request, 0.5, nproc)
        return 0, ""

    monkeypatch.setattr(processes, "run_torchrun_command", launch)
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(tmp_path / "db.duckdb"))
    out = tmp_path / "tuned"
    first = cli_in_process(*TUNE, "--emit", out)
    assert first.returncode == 0, first.stderr
    assert len(launched) == 1 and len(launched[0]) == 2
    measured_first = {record.id for record in BenchmarkStore(tmp_path / "db.duckdb").runs()}
    again = cli_in_process(*TUNE)
    assert again.returncode == 0 and len(launched) == 1 and "2 trial(s) were already measured" in again.stdout
    fresh = cli_in_process(*TUNE, "--remeasure", "--emit", out, "--force")
    assert fresh.returncode == 0, fresh.stderr
    assert sorted(launched[1]) == sorted(launched[0]) and "already measured" not in fresh.stdout
    records = {record.id for record in BenchmarkStore(tmp_path / "db.duckdb").runs()}
    assert len(measured_first) == 2 and measured_first < records and len(records) == 4
    named = {trial["record_id"] for trial in json.loads((out / "plan.json").read_text())["tune"]["trials"]}
    # The new measurements, not the first tune's (told apart by id: the stand-in writes all four within the same
    # second, so the records' times do not order them).
    assert named == records - measured_first


def test_tune_help_says_what_remeasure_and_force_do():
    result = cli_in_process("tune", "--help")
    assert "--remeasure" in result.stdout and "Measure every trial again" in result.stdout
    assert "--force" in result.stdout


def test_force_without_emit_is_one_line_as_plans_is():
    result = cli_in_process(*TUNE, "--force")
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: --force replaces the files of an --emit folder; add --emit DIR, or drop --force"
    ]
