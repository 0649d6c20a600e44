"""One plan, four engines: ours, DDP, FSDP2 and DeepSpeed each run it via backends.run and agree.

The plans differ only in strategy (same tiny GPT-2, batch, optimizer and LR
schedule, fp32), so every adapter must produce the same loss curve: DDP is
the reference the others are compared with.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from planner.emit import emit_run_folder
from tests.distributed import REPO_ROOT, cpu_env, run_torchrun
from tests.emit_plans import make_plan

STRATEGIES = {"ddp": {}, "engine": {"zero_stage": 3}, "fsdp": {}, "deepspeed": {"zero_stage": 2}}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for strategy, fields in STRATEGIES.items():
        emit_run_folder(make_plan(strategy=strategy, **fields), root / strategy)
    return root


@pytest.fixture(scope="module")
def results(folders):
    out = folders / "results.json"
    run_torchrun(["tests/engine_jobs/all_adapters.py", str(out), *(str(folders / s) for s in STRATEGIES)], nproc=2,
                 timeout=300)
    return {result["strategy"]: result for result in json.loads(out.read_text())}


def test_every_adapter_completes_the_same_plan(results):
    assert set(results) == set(STRATEGIES)
    assert all(result["steps"] == 3 and result["world_size"] == 2 for result in results.values())


def test_every_adapter_follows_the_ddp_loss_curve(results):
    reference = results["ddp"]["losses"]
    for strategy, result in results.items():
        assert result["losses"] == pytest.approx(reference, abs=1e-5), strategy


def test_metrics_jsonl_has_phase_times_throughput_and_memory(results):
    for strategy, result in results.items():
        with open(result["metrics"], encoding="utf-8") as handle:
            lines = [json.loads(line) for line in handle]
        assert [line["step"] for line in lines] == [1, 2, 3], strategy
        for key in ("forward_s", "backward_s", "comm_s", "optimizer_s", "tokens_per_s", "peak_rss_bytes"):
            assert all(line[key] >= 0 for line in lines), (strategy, key)
        assert lines[-1]["tracked_bytes"] > 0 and lines[-1]["tokens"] == 2 * 1 * 2 * 32, strategy


def _cli(*args):
    return subprocess.run([sys.executable, "hardware_selector.py", *args], cwd=REPO_ROOT, env=cpu_env(),
                          capture_output=True, text=True, timeout=300)


# `train RUN_DIR` end to end (CLI, torchrun, checkpoints): tests/test_train_cpu_fallback.py.


def test_train_command_rejects_a_folder_without_a_plan(tmp_path):
    completed = _cli("train", str(tmp_path))
    assert completed.returncode == 2 and "no plan.json" in completed.stderr
    assert len(completed.stderr.strip().splitlines()) == 1
