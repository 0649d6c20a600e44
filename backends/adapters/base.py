"""What the runner needs from any way of training: one optimizer step, evaluation, state, weights.

An adapter wraps one engine (ours, torch DDP, FSDP2, DeepSpeed) behind the
same small surface, so the runner's loop (backends/runner/loop.py) is
written once and every strategy is trained, measured, checkpointed and
exported the same way:

- `train_step(micro_batches, guard)`: forward and backward over one step's
  micro-batches, then the update, unless the guard (the run's anomaly rules)
  refuses it on the step's loss and gradient norm *before* anything changes;
- `set_lr(lr)`: the runner owns the schedule, so every adapter applies the
  same learning rate at every step;
- `eval_loss(batch)`: the mean token loss of a batch, without gradients;
- `save(folder)` / `load(folder)`: this rank's state in a checkpoint folder;
- `full_state_dict()`: the whole model's HF-named weights, on rank 0, for export.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.contract.engine_config import EngineConfig
from planner.contract.run_config import RunConfig
from planner.plan import Plan

if TYPE_CHECKING:
    from collections.abc import Iterable

    import torch

# guard(loss, grad_norm) -> True to apply the update; grad_norm is None when it is not known before the update.
Guard = Callable[[float, float | None], bool]


@dataclass
class StepOutcome:
    loss: float  # mean over the step's micro-batches and the data-parallel ranks
    grad_norm: float | None  # global L2 norm of the gradient before clipping (None: not reported)
    applied: bool  # False: skipped (fp16 overflow, or refused by the guard)
    compute_s: float  # forward and backward
    optimizer_s: float  # reduction tail, clipping and the update
    overflow: bool = False  # fp16: the loss scaler skipped the step (not an anomaly)
    norm_checked_before_update: bool = True  # False: the engine applies the update before reporting the norm


@dataclass
class AdapterSetup:
    """Everything an adapter is built from; `make_model(empty=...)` builds the model (meta when empty)."""

    plan: Plan
    run: RunConfig
    engine_config: EngineConfig  # the shared settings: precision, ZeRO, clipping, optimizer; no scheduler
    make_model: Callable[..., Any]
    weights_folder: str | None  # a local HF checkpoint to start from (None: random initialisation)
    device: torch.device
    run_dir: Path
    ds_config: dict | None = None
    extra: dict = field(default_factory=dict)


class Adapter:
    name = "adapter"
    supports_skip_before_update = True

    def __init__(self, setup: AdapterSetup):
        from backends.ranks import distributed, rank, world_size

        self.setup = setup
        self.device = setup.device
        self.distributed = distributed()
        self.rank = rank()
        self.world = world_size()
        # Data-parallel ranks: every rank for DDP, FSDP and DeepSpeed; our engine narrows it to its dp group.
        self.data_rank, self.data_world = self.rank, setup.run.layout.dp
        _, self.micro_batch, self.grad_accum = setup.engine_config.batch_sizes(self.data_world)

    # --- the runner's surface --------------------------------------------------------------
    def set_lr(self, lr: float) -> None:
        for group in self.param_groups():
            group["lr"] = lr

    def param_groups(self) -> list[dict]:
        raise NotImplementedError

    def train_step(self, micro_batches: list[dict], guard: Guard) -> StepOutcome:
        raise NotImplementedError

    def eval_loss(self, batch: dict) -> float:
        raise NotImplementedError

    def save(self, folder: Path) -> None:
        raise NotImplementedError

    def load(self, folder: Path) -> None:
        raise NotImplementedError

    def full_state_dict(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def held_bytes(self) -> int:
        """Bytes of parameters, gradients and optimizer states this rank holds (CPU runs report these)."""
        return 0

    def close(self) -> None:
        pass

    # --- helpers -------------------------------------------------------------------------------
    def mean_over_data_ranks(self, value: float, group: Any = None) -> float:
        import torch
        import torch.distributed as dist

        if not self.distributed or self.data_world == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, group=group)
        return float(tensor.item()) / self.data_world

    def synchronize(self) -> float:
        """time.perf_counter() once the device has finished its queued work."""
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
        return time.perf_counter()


def tensor_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    total = 0
    for tensor in tensors:
        if tensor is None or not hasattr(tensor, "numel"):
            continue
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        total += local.numel() * local.element_size()
    return total
