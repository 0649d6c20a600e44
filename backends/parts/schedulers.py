"""DeepSpeed's learning-rate schedules (WarmupLR, WarmupDecayLR, WarmupCosineLR), same formulas.

`lr_at(block, base_lr, iteration)` is the schedule as a pure function (no block: base_lr); the
runner calls it for step k (k = 1, 2, ...) of every adapter, so all of them
apply the same rate. WarmupSchedule is the stateful form our engine uses when
driven directly through backends.initialize: it sets each param group's lr
absolutely, starts at iteration -1 like DeepSpeed (the first step uses the
warmup's starting lr) and steps once per optimizer step, overflow-skipped
steps included, as DeepSpeed's engine does.
"""

from __future__ import annotations

import math
from typing import Any

from planner.contract.engine_config import SchedulerBlock


def lr_at(block: SchedulerBlock | None, base_lr: float, iteration: int) -> float:
    if block is None:  # no scheduler block: a constant rate
        return base_lr
    params = block.params
    warmup = max(2, params.warmup_num_steps)

    def warmup_fraction() -> float:
        if params.warmup_type == "log":
            return math.log(iteration + 1) / math.log(warmup)
        return iteration / warmup

    if block.type == "WarmupCosineLR":
        if iteration < 0:
            return 0.0
        if iteration < warmup:
            ratio = params.warmup_min_ratio + warmup_fraction() * (1.0 - params.warmup_min_ratio)
        else:
            total = params.total_num_steps or 0
            progress = min(1.0, (iteration - warmup + 1) / max(1, total - warmup))
            ratio = max(
                0.0, params.cos_min_ratio + (1.0 - params.cos_min_ratio) * (1 + math.cos(math.pi * progress)) / 2
            )
        return base_lr * ratio
    top = params.warmup_max_lr if params.warmup_max_lr is not None else base_lr
    if iteration < 0:
        return params.warmup_min_lr
    if iteration < warmup:
        gamma = warmup_fraction()
    elif block.type == "WarmupDecayLR":
        total = params.total_num_steps or 0
        gamma = max(0.0, (total - iteration) / max(1.0, total - warmup))
    else:
        gamma = 1.0
    return params.warmup_min_lr + (top - params.warmup_min_lr) * gamma


class WarmupSchedule:
    def __init__(self, optimizer: Any, block: SchedulerBlock):
        self.optimizer = optimizer
        self.block = block
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self.last_batch_iteration = block.params.last_batch_iteration
        self._apply()

    def _apply(self) -> None:
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = lr_at(self.block, base, self.last_batch_iteration)

    def step(self) -> None:
        self.last_batch_iteration += 1
        self._apply()

    def get_last_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        return {"last_batch_iteration": self.last_batch_iteration}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last_batch_iteration = int(state["last_batch_iteration"])
        self._apply()
