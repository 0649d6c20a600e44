"""Mixed precision: the compute dtype and fp16's dynamic loss scaler.

The scaler follows DeepSpeed's DynamicLossScaler rule for rule, so a run moved
between DeepSpeed and our engine sees the same scale sequence: on inf/nan the
step is skipped and, once hysteresis is used up, the scale halves (never below
min_loss_scale); after `loss_scale_window` clean steps since the last overflow
it doubles. A static loss_scale (> 0) never changes.
"""

from __future__ import annotations

from typing import Any

from planner.contract.engine_config import EngineConfig


def compute_dtype(config: EngineConfig) -> Any:
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[config.compute_dtype_name]


class LossScaler:
    """Scale 1 and no overflow checks unless fp16 is on."""

    def __init__(self, config: EngineConfig):
        fp16 = config.fp16
        self.enabled = fp16.enabled
        self.dynamic = fp16.enabled and fp16.loss_scale == 0
        self.scale = (2.0**fp16.initial_scale_power if self.dynamic else fp16.loss_scale) if fp16.enabled else 1.0
        self.window = fp16.loss_scale_window
        self.min_scale = fp16.min_loss_scale
        self.hysteresis = fp16.hysteresis
        self.hysteresis_left = fp16.hysteresis
        self.consecutive_hysteresis = fp16.consecutive_hysteresis
        self.iteration = 0
        self.last_overflow_iteration = -1

    @property
    def checks_overflow(self) -> bool:
        return self.enabled

    def update(self, overflow: bool) -> None:
        """Record one optimizer step's outcome (call it at every boundary, skipped or not)."""
        if not self.dynamic:
            self.iteration += 1
            return
        if overflow:
            if self.hysteresis == 1 or self.hysteresis_left == 1:
                if self.scale == self.min_scale:
                    raise FloatingPointError(
                        "fp16 loss scale is already at min_loss_scale and gradients still overflow; "
                        "use bf16 or lower the learning rate"
                    )
                self.scale = max(self.scale / 2.0, self.min_scale)
            else:
                self.hysteresis_left -= 1
            self.last_overflow_iteration = self.iteration
        else:
            if self.consecutive_hysteresis:
                self.hysteresis_left = self.hysteresis
            clean_steps = self.iteration - self.last_overflow_iteration - 1
            if clean_steps > 0 and clean_steps % self.window == 0:
                if not self.consecutive_hysteresis:
                    self.hysteresis_left = self.hysteresis
                self.scale *= 2.0
        self.iteration += 1

    def state_dict(self) -> dict[str, Any]:
        return {
            "scale": self.scale,
            "hysteresis_left": self.hysteresis_left,
            "iteration": self.iteration,
            "last_overflow_iteration": self.last_overflow_iteration,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scale = float(state["scale"])
        self.hysteresis_left = int(state["hysteresis_left"])
        self.iteration = int(state["iteration"])
        self.last_overflow_iteration = int(state["last_overflow_iteration"])
