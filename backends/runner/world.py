"""Fit a run folder's RunConfig to the processes it was actually started with, and pick the device.

A plan states its process count, but a run may start with another (a
smaller machine, `train --nproc`). The model-parallel split is kept and
data parallelism absorbs the difference. A real run keeps the plan's global
batch by changing gradient accumulation (the same training, only slower or
faster), or refuses in one line when the batch does not split; a --tiny
smoke run keeps each rank's batch instead, so it stays a few seconds long.
A CUDA plan on a machine without CUDA runs its --tiny smoke test on CPU
processes over gloo and is refused otherwise.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from planner.contract.run_config import RunConfig
from planner.errors import UserInputError

if TYPE_CHECKING:
    import torch


def fit_to_world(run: RunConfig, world: int, *, tiny: bool, local_world: int | None = None) -> tuple[RunConfig, str]:
    """(the run as it executes on `world` processes, a note saying what changed or "")."""
    if world == run.world_size:
        return run, ""
    try:
        layout = run.layout.with_world_size(world)
    except ValueError as error:
        raise UserInputError(f"{error}; start a multiple of {run.layout.model_parallel} processes") from None
    per_node = local_world or world
    nodes = max(1, world // per_node)
    if tiny:
        grad_accum = run.grad_accum
        note = (
            f"note: {world} process{'es' * (world != 1)} instead of the plan's {run.world_size}; --tiny keeps "
            "each rank's batch "
            f"({run.micro_batch} x {run.grad_accum}), so the global batch is {run.micro_batch * grad_accum * layout.dp}"
        )
    else:
        per_micro_step = run.micro_batch * layout.dp
        if run.global_batch % per_micro_step:
            raise UserInputError(
                f"the plan's global batch {run.global_batch} does not split over {layout.dp} "
                f"data-parallel ranks of micro-batch {run.micro_batch}; start {run.world_size} "
                "processes, or re-emit the plan for this machine"
            )
        grad_accum = run.global_batch // per_micro_step
        note = (
            f"note: {world} process{'es' * (world != 1)} instead of the plan's {run.world_size}: the global batch "
            f"stays {run.global_batch} with gradient accumulation {grad_accum} (was {run.grad_accum})"
        )
    fitted = run.model_copy(
        update={"layout": layout, "grad_accum": grad_accum, "nproc_per_node": world // nodes, "num_nodes": nodes}
    )
    return RunConfig.model_validate(fitted.model_dump()), note


# The tokens per sequence a --tiny run trains at most (the shrunken model's), in the ranks and in `train`'s checks.
TINY_SEQ_LEN = 32


def fit_tiny(run: RunConfig, seq_len: int = TINY_SEQ_LEN) -> RunConfig:
    """A --tiny smoke run: short sequences, and the plan's pipeline split fitted to the shrunken model's layers
    (its stage map counts the full model's; the balanced split of as many chunks per rank as the layers allow)."""
    from backends.weights.model_factory import TINY_SIZES

    layout = run.layout
    if layout.pp > 1:
        chunks_per_rank = max(1, min(layout.virtual_stages, TINY_SIZES["layers"] // layout.pp))
        layout = layout.model_copy(update={"stage_layers": None, "virtual_stages": chunks_per_rank})
    return run.model_copy(update={"seq_len": min(run.seq_len, seq_len), "layout": layout})


def fit_device(run: RunConfig, *, tiny: bool) -> RunConfig:
    from backends.cpu_distributed import runs_on_cpu_instead

    if runs_on_cpu_instead(run.device, tiny=tiny):
        return run.model_copy(update={"device": "cpu", "dist_backend": "gloo"})
    return run


def process_counts() -> tuple[int, int, int, int]:
    """(rank, world, local rank, local world) from the launcher's environment (1 process without one)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    return rank, world, local_rank, local_world


def start_distributed(backend: str) -> None:
    """The process group, when there is more than one process (or torchrun started this one)."""
    from backends.distributed_init import init_distributed

    _, world, _, _ = process_counts()
    if world > 1 or "TORCHELASTIC_RUN_ID" in os.environ:
        init_distributed(backend)


def rank_device(kind: str, local_rank: int) -> torch.device:
    """This rank's device: its own GPU (made the current one, as NCCL expects), or the CPU."""
    import torch

    device = torch.device("cuda", local_rank) if kind == "cuda" else torch.device("cpu")
    if kind == "cuda":
        torch.cuda.set_device(device)
    return device
