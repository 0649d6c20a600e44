"""`hardware-selector train DIR --tiny` runs a plan made for GPUs on this CPU-only machine, as users do on a laptop.

The plan is emitted for two H100s with our engine and tensor parallelism 2
(engine.json: device cuda, nccl). With --tiny it must run as two CPU
processes over gloo and say so once; its first loss must equal the loss of
the same tiny model and micro-batches on one process. Without --tiny it
must stop with a one-line error that points at --tiny. (This is also a
test of `train RUN_DIR` end to end: CLI, torchrun, the runner, checkpoints.)
"""

from __future__ import annotations

import json

import pytest

from planner.rundir.write import emit_run_folder
from tests.distributed import cli_in_process as cli
from tests.emit_plans import make_plan

FALLBACK_NOTE = "note: no CUDA GPU here; running this GPU plan's --tiny smoke run on CPU with gloo"


@pytest.fixture(scope="module")
def gpu_tp2_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("h100_tp2") / "run"
    from planner.contract.run_config import Hyperparameters
    from planner.rundir.write import RunOptions

    plan = make_plan(
        gpu="H100-80GB", gpus_per_node=2, strategy="engine", zero_stage=1, tensor_parallel=2, precision="fp32"
    )
    emit_run_folder(plan, folder, options=RunOptions(optim=Hyperparameters(dropout=0.0)))  # comparable bit for bit
    return folder


def _first_step_loss_on_one_process(folder) -> float:
    """The runner's first step (the same model builder, seed, synthetic stream and micro-batches) without tp."""
    import torch

    from backends.data import SyntheticTokens, micro_batches
    from backends.runner.world import TINY_SEQ_LEN
    from backends.weights.model_init import build_model
    from planner.rundir.plan_file import read_plan_file

    _, run = read_plan_file(folder)
    model = build_model(run.model, tiny=True, seed=run.optim.seed, dropout=run.optim.dropout)
    dataset = SyntheticTokens(1 << 16, min(run.seq_len, TINY_SEQ_LEN), model.config.vocab_size, seed=run.data.seed)
    stream = micro_batches(dataset, micro_batch=run.micro_batch, rank=0, world=1, shuffle=False)
    with torch.no_grad():
        losses = [model(input_ids=ids, labels=ids).loss.item() for ids in (next(stream) for _ in range(run.grad_accum))]
    return sum(losses) / len(losses)


def test_the_emitted_plan_targets_gpus_with_tp2(gpu_tp2_folder):
    block = json.loads((gpu_tp2_folder / "engine.json").read_text())["hardware_selector"]
    assert (block["device"], block["dist_backend"], block["layout"]["tp"]) == ("cuda", "nccl", 2)


@pytest.mark.slow
def test_tiny_runs_the_gpu_tp2_plan_on_cpu_with_gloo(gpu_tp2_folder):
    completed = cli("train", gpu_tp2_folder, "--tiny", "--steps", "2", "--nproc", "2", "--save-every", "2")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stderr.count(FALLBACK_NOTE) == 1  # rank 0 says it, once
    result = json.loads(next(line for line in completed.stdout.splitlines() if line.startswith("RUN_RESULT"))[11:])
    assert (result["strategy"], result["steps"], result["world_size"]) == ("engine", 2, 2)
    rows = [json.loads(line) for line in (gpu_tp2_folder / "metrics.jsonl").read_text().splitlines()]
    first = next(row for row in rows if row["kind"] == "train")
    assert first["loss"] == pytest.approx(_first_step_loss_on_one_process(gpu_tp2_folder), abs=1e-5)
    assert (gpu_tp2_folder / "checkpoints" / "latest").read_text() == "global_step2"


def test_without_tiny_a_gpu_plan_is_a_one_line_error(gpu_tp2_folder):
    completed = cli("train", gpu_tp2_folder, "--steps", "1")
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [
        "error: this plan runs on CUDA GPUs (device cuda, nccl) and this machine has none; pass --tiny for a CPU "
        "smoke run of the same layout, or run it on the planned GPUs"
    ]


def test_gpu_ddp_and_fsdp_plans_get_cpu_and_gloo_under_tiny(tmp_path):
    import torch

    from backends.runner.world import fit_device
    from planner.rundir.plan_file import read_plan_file

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the plans run as planned")
    for strategy in ("ddp", "fsdp"):
        folder = tmp_path / strategy
        emit_run_folder(make_plan(gpu="H100-80GB", gpus_per_node=2, strategy=strategy), folder)
        _, run = read_plan_file(folder)
        assert run.device == "cuda"
        fitted = fit_device(run, tiny=True)  # what every adapter reads
        assert (fitted.device, fitted.dist_backend) == ("cpu", "gloo"), strategy


def test_a_process_count_that_cannot_hold_the_layout_is_a_one_line_error(gpu_tp2_folder):
    completed = cli("train", gpu_tp2_folder, "--tiny", "--nproc", "3")
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [
        "error: --nproc 3 cannot hold this plan's tensor x pipeline parallel layout of 2 ranks; pass a multiple of 2"
    ]
