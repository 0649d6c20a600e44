"""DeepSpeed's learning-rate schedules (WarmupLR, WarmupDecayLR, WarmupCosineLR), same formulas.

They set each param group's lr absolutely, start at iteration -1 -> 0 like
DeepSpeed (the first step uses the warmup's starting lr), and step once per
optimizer step, overflow-skipped steps included, as DeepSpeed's engine does.
"""

from __future__ import annotations

import math
from typing import Any

from .config import SchedulerBlock


class WarmupSchedule:
    def __init__(self, optimizer: Any, block: SchedulerBlock):
        self.optimizer = optimizer
        self.kind = block.type
        params = block.params
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self.min_lr = params.warmup_min_lr
        self.max_lrs = [params.warmup_max_lr if params.warmup_max_lr is not None else lr for lr in self.base_lrs]
        self.warmup_steps = max(2, params.warmup_num_steps)
        self.warmup_type = params.warmup_type
        self.total_steps = params.total_num_steps or 0
        self.warmup_min_ratio = params.warmup_min_ratio
        self.cos_min_ratio = params.cos_min_ratio
        self.last_batch_iteration = params.last_batch_iteration
        self._apply()

    def _warmup_fraction(self) -> float:
        it = self.last_batch_iteration
        if self.warmup_type == "log":
            return math.log(it + 1) / math.log(self.warmup_steps)
        return it / self.warmup_steps

    def _lrs(self) -> list[float]:
        it = self.last_batch_iteration
        if self.kind == "WarmupCosineLR":
            if it < 0:
                return [0.0 for _ in self.base_lrs]
            if it < self.warmup_steps:
                ratio = self.warmup_min_ratio + self._warmup_fraction() * (1.0 - self.warmup_min_ratio)
            else:
                progress = min(1.0, (it - self.warmup_steps + 1) / max(1, self.total_steps - self.warmup_steps))
                ratio = max(0.0, self.cos_min_ratio + (1.0 - self.cos_min_ratio) * (1 + math.cos(math.pi * progress)) / 2)
            return [lr * ratio for lr in self.base_lrs]
        if it < 0:
            return [self.min_lr for _ in self.max_lrs]
        if it < self.warmup_steps:
            gamma = self._warmup_fraction()
        elif self.kind == "WarmupDecayLR":
            gamma = max(0.0, (self.total_steps - it) / max(1.0, self.total_steps - self.warmup_steps))
        else:
            gamma = 1.0
        return [self.min_lr + (top - self.min_lr) * gamma for top in self.max_lrs]

    def _apply(self) -> None:
        for group, lr in zip(self.optimizer.param_groups, self._lrs()):
            group["lr"] = lr

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
