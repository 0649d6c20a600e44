"""Context parallelism alone (tp and pp 1): check what composes, then split the sequences (backends/parallelize.py)."""

from __future__ import annotations

from typing import Any

from backends.context_parallel.apply import ContextParallel, apply_context_parallel
from backends.ranks import require_ranks
from backends.weights.model_init import place_whole
from planner.contract.layout import ParallelDims
from planner.errors import UserInputError


def start_context_parallel(model: Any, layout: ParallelDims, weights: Any, device: Any) -> ContextParallel:
    """Fill the model if it is on the meta device, switch its attention to the cp one, return the groups."""
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
    return apply_context_parallel(model, layout.cp, device.type)
