"""How many steps a run takes: --steps, else its epochs over the data (docs/running.md), for either door."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.contract.run_config import RunConfig

SYNTHETIC_DEFAULT_STEPS = 10  # random tokens have no epoch to count


def total_steps(run: RunConfig, train_blocks: int, synthetic: bool) -> int:
    if run.optim.max_steps:
        return run.optim.max_steps
    if synthetic:
        return SYNTHETIC_DEFAULT_STEPS
    return max(1, math.ceil(run.optim.epochs * train_blocks / run.global_batch))
