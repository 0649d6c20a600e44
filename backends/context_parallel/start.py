"""backends.initialize with layout.cp > 1: check what composes, then split the sequences (docs/engine.md)."""

from __future__ import annotations

from typing import Any

from backends.split_start import place_whole, require_ranks
from planner.contract.engine_config import EngineConfig
from planner.errors import UserInputError

from .apply import ContextParallel, apply_context_parallel


def start_context_parallel(model: Any, settings: EngineConfig, weights: Any, device: Any) -> ContextParallel:
    """Fill the model if it is on the meta device, switch its attention to the cp one, return the groups."""
    block, layout = settings.hardware_selector, settings.hardware_selector.layout
    if layout.ep > 1:
        raise UserInputError(
            f"layout {layout.describe()}: context parallelism composes with data and tensor parallelism and ZeRO "
            "here; use ep 1"
        )
    if not hasattr(getattr(model, "config", None), "_attn_implementation") or not hasattr(model, "get_decoder"):
        raise UserInputError(
            f"layout.cp splits a transformers causal LM's sequences; {type(model).__name__} is not one"
        )
    require_ranks("layout.cp", layout.cp, "each sequence")
    place_whole(model, weights, device)
    context_parallel = apply_context_parallel(model, layout.cp, device.type)
    from backends.activation_checkpointing import apply_activation_checkpointing

    apply_activation_checkpointing(model, block.activation_checkpointing)
    return context_parallel
