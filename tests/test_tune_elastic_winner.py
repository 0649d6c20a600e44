"""`tune RUN_DIR` on a folder emitted with --elastic: the winner keeps the folder's node range.

gpt2 on 2 CPU "GPUs" per node, global batch 6, elastic over 1:2 nodes: FSDP has no layout on 2 nodes (6 does not
split over 4 data-parallel ranks), our engine's tensor parallelism does. The trials' launch is a stand-in that
measures FSDP fastest (the reference: which plan the folder holds afterwards, and what the lines say). The
refusal used to read "--elastic 1:2: ...; drop --elastic" after every trial had run, though the user gave no
--elastic, and left no plan that kept the range.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from distributed import cli_in_process
from test_tune import write_trial

from planner.rundir.trial import REQUEST_FILE, TrialRequest


def launch_where_fsdp_is_fastest(others_fail: bool):
    def launch(target, nproc, timeout_s, launcher="torchrun"):
        for folder in map(Path, target[2:]):
            request = TrialRequest.model_validate_json((folder / REQUEST_FILE).read_text())
            fsdp = json.loads((folder / "plan.json").read_text())["config"]["strategy"] == "fsdp"
            if not fsdp and others_fail:
                return 1, "[rank0]: torch.OutOfMemoryError: CPU out of memory"
            write_trial(folder, request, 0.1 if fsdp else 1.0, nproc)
        return 0, ""

    return launch


@pytest.fixture
def elastic_folder(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(tmp_path / "db.duckdb"))
    run_dir = tmp_path / "run"
    emitted = cli_in_process("plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "32",
                             "--global-batch", "6", "--emit", run_dir, "--elastic", "1:2")  # fmt: skip
    assert emitted.returncode == 0, emitted.stderr
    return run_dir


def test_the_fastest_plan_that_keeps_the_range_wins_and_the_faster_one_is_named(elastic_folder, monkeypatch):
    from benchmarks.harness import processes

    monkeypatch.setattr(processes, "run_torchrun_command", launch_where_fsdp_is_fastest(others_fail=False))
    tuned = cli_in_process("tune", elastic_folder, "--candidates", "3", "--budget", "5", "--tiny")
    assert tuned.returncode == 0, tuned.stderr
    after = json.loads((elastic_folder / "plan.json").read_text())
    assert after["config"]["strategy"] != "fsdp" and after["tune"]["winner"] == "engine TP"
    assert (after["elastic"]["min_nodes"], after["elastic"]["max_nodes"]) == (1, 2)
    assert (
        f"tune: FSDP grad-op measured faster, but {elastic_folder} is elastic over 1:2 nodes and 2 nodes fit no plan "
        "of its family (FSDP full-shard: global batch 6 is not a multiple of its data-parallel size 4); the winner "
        "is engine TP"
    ) in tuned.stderr
    assert "--elastic" not in tuned.stderr


def test_when_no_measured_plan_keeps_the_range_the_line_names_the_folder_not_a_flag(elastic_folder, monkeypatch):
    from benchmarks.harness import processes

    before = (elastic_folder / "plan.json").read_bytes()
    monkeypatch.setattr(processes, "run_torchrun_command", launch_where_fsdp_is_fastest(others_fail=True))
    tuned = cli_in_process("tune", elastic_folder, "--candidates", "3", "--budget", "5", "--tiny")
    assert tuned.returncode == 2
    (line,) = tuned.stderr.strip().splitlines()
    assert line == (
        f"error: {elastic_folder} is elastic over 1:2 nodes, and no measured plan keeps that range (FSDP grad-op: 2 "
        "nodes fit no plan, FSDP full-shard: global batch 6 is not a multiple of its data-parallel size 4); the "
        "folder is left as it was: train it as it is, or tune more families (--candidates, --strategies)"
    )
    assert (elastic_folder / "plan.json").read_bytes() == before
