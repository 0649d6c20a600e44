"""`hardware-selector train DIR --tiny` runs a plan made for GPUs on this CPU-only machine, as users do on a laptop.

The plan is emitted for two H100s with our engine and tensor parallelism 2
(engine.json: device cuda, nccl). With --tiny it must run as two CPU
processes over gloo and say so once; its first loss must equal the loss of
the same tiny model and micro-batches on one process. Without --tiny it
must stop with a one-line error that points at --tiny. (This is also the
test of `train RUN_DIR` end to end: CLI, torchrun, backends.run, checkpoints.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from planner.emit import emit_run_folder
from tests.distributed import REPO_ROOT, cpu_env
from tests.emit_plans import make_plan

FALLBACK_NOTE = "note: no CUDA GPU here; running this GPU plan's --tiny smoke run on CPU with gloo"


@pytest.fixture(scope="module")
def gpu_tp2_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("h100_tp2") / "run"
    plan = make_plan(gpu="H100-80GB", gpus_per_node=2, strategy="engine", zero_stage=1, tensor_parallel=2,
                     precision="fp32")
    emit_run_folder(plan, folder)
    return folder


def _cli(*args):
    return subprocess.run([sys.executable, "hardware_selector.py", *map(str, args)], cwd=REPO_ROOT, env=cpu_env(),
                          capture_output=True, text=True, timeout=300)


def _first_step_loss_on_one_process(folder) -> float:
    """backends.run's first step (the same model, seed, data stream and micro-batches) without tp."""
    import torch

    from backends.data import SyntheticTokens, micro_batches
    from backends.model_factory import build_causal_lm, tiny_config
    from backends.run import TINY_SEQ_LEN
    from planner.emit.plan_json import read_plan_file

    _, target = read_plan_file((folder / "plan.json").read_text(encoding="utf-8"))
    hf_config = tiny_config(target.hf_config)
    model = build_causal_lm(hf_config, seed=0)
    dataset = SyntheticTokens(4096, min(target.seq_len, TINY_SEQ_LEN), hf_config["vocab_size"], seed=0)
    stream = micro_batches(dataset, micro_batch=target.micro_batch, rank=0, world=1, start_sample=0)
    with torch.no_grad():
        losses = [model(input_ids=ids, labels=ids).loss.item() for ids in
                  (next(stream) for _ in range(target.grad_accum))]
    return sum(losses) / len(losses)


def test_the_emitted_plan_targets_gpus_with_tp2(gpu_tp2_folder):
    block = json.loads((gpu_tp2_folder / "engine.json").read_text())["hardware_selector"]
    assert (block["device"], block["dist_backend"], block["layout"]["tensor_parallel"]) == ("cuda", "nccl", 2)


def test_tiny_runs_the_gpu_tp2_plan_on_cpu_with_gloo(gpu_tp2_folder):
    completed = _cli("train", gpu_tp2_folder, "--tiny", "--steps", "2", "--nproc", "2", "--save-every", "2")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stderr.count(FALLBACK_NOTE) == 1  # rank 0 says it, once
    result = json.loads(next(line for line in completed.stdout.splitlines() if line.startswith("RUN_RESULT"))[11:])
    assert (result["strategy"], result["steps"], result["world_size"]) == ("engine", 2, 2)
    assert result["losses"][0] == pytest.approx(_first_step_loss_on_one_process(gpu_tp2_folder), abs=1e-5)
    assert (gpu_tp2_folder / "checkpoints" / "latest").read_text() == "global_step2"


def test_without_tiny_a_gpu_plan_is_a_one_line_error(gpu_tp2_folder):
    completed = _cli("train", gpu_tp2_folder, "--steps", "1")
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [
        "error: this plan runs on CUDA GPUs (device cuda, nccl) and this machine has none; pass --tiny for a CPU "
        "smoke run of the same layout, or run it on the planned GPUs"]


def test_gpu_ddp_and_fsdp_plans_get_cpu_and_gloo_under_tiny(tmp_path):
    import torch

    from backends.run import engine_config_for, fit_to_this_machine, read_run

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the plans run as planned")
    for strategy in ("ddp", "fsdp"):
        folder = tmp_path / strategy
        emit_run_folder(make_plan(gpu="H100-80GB", gpus_per_node=2, strategy=strategy), folder)
        plan, target = read_run(folder)
        planned = engine_config_for(folder, plan, target, tiny=True)
        assert planned.hardware_selector.device == "cuda"
        block = fit_to_this_machine(planned, tiny=True).hardware_selector  # what every adapter reads
        assert (block.device, block.dist_backend) == ("cpu", "gloo"), strategy


def test_a_process_count_that_cannot_hold_the_layout_is_a_one_line_error(gpu_tp2_folder):
    completed = _cli("train", gpu_tp2_folder, "--tiny", "--nproc", "3")
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [
        "error: --nproc 3 cannot hold this plan's tensor x pipeline parallel layout of 2 ranks; pass a multiple of 2"]
