"""backends.initialize with layout.ep > 1: check what composes, then split the experts (docs/engine.md)."""

from __future__ import annotations

from typing import Any

from backends.split_start import place_whole, require_ranks
from planner.contract.engine_config import EngineConfig
from planner.errors import UserInputError

from .apply import ExpertParallel, apply_expert_parallel


def start_expert_parallel(model: Any, settings: EngineConfig, weights: Any, device: Any) -> ExpertParallel:
    """Fill the model if it is on the meta device, swap in this rank's experts, and return the groups."""
    block, layout = settings.hardware_selector, settings.hardware_selector.layout
    if layout.cp > 1:  # (with tp, backends/parallelize.py splits the experts; it refuses pp and cp)
        raise UserInputError(
            f"layout {layout.describe()}: expert parallelism composes with data and tensor parallelism here; use cp 1"
        )
    require_ranks("layout.ep", layout.ep, "the experts")
    place_whole(model, weights, device)  # every rank holds the whole model, then keeps its experts
    try:
        expert_parallel = apply_expert_parallel(model, layout.ep, block.expert_capacity_factor, device.type)
    except ValueError as error:
        raise UserInputError(str(error)) from None
    from backends.activation_checkpointing import apply_activation_checkpointing

    apply_activation_checkpointing(model, block.activation_checkpointing)
    return expert_parallel
