"""ZeRO-0 and ZeRO-1: replicated parameters and gradients; optimizer states sharded (stage 1) or not (0).

Gradients accumulate locally over the micro-steps; at the boundary every
bucket is reduce-scattered (stage 1) or all-reduced (stage 0) at once, after
backward, so the micro-steps in between communicate nothing.
"""

from __future__ import annotations

from typing import Any

from .flat_unit import group_parameters
from .optimizer import ZeroOptimizer


class ZeroStage0(ZeroOptimizer):
    stage = 0

    def parameter_groups(self, model: Any) -> list:
        return group_parameters(model, self.config.zero_optimization.reduce_bucket_size)


class ZeroStage1(ZeroStage0):
    stage = 1
