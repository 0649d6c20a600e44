"""Expert parallelism alone (tp and pp 1): check what composes, then split the experts (backends/parallelize.py)."""

from __future__ import annotations

from typing import Any

from backends.expert_parallel.apply import ExpertParallel, apply_expert_parallel
from backends.ranks import require_ranks
from backends.weights.model_init import place_whole
from planner.contract.layout import ParallelDims
from planner.errors import UserInputError


def start_expert_parallel(
    model: Any, layout: ParallelDims, capacity_factor: float, weights: Any, device: Any
) -> ExpertParallel:
    """Fill the model if it is on the meta device, swap in this rank's experts, and return the groups."""
    if layout.cp > 1:  # (with tp, backends/model_parallel/split.py splits the experts)
        raise UserInputError(
            f"layout {layout.describe()}: expert parallelism composes with data and tensor parallelism here; use cp 1"
        )
    require_ranks("layout.ep", layout.ep, "the experts")
    place_whole(model, weights, device)  # every rank holds the whole model, then keeps its experts
    try:
        return apply_expert_parallel(model, layout.ep, capacity_factor, device.type)
    except ValueError as error:
        raise UserInputError(str(error)) from None
