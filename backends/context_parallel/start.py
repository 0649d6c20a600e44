"""backends.initialize with layout.cp > 1: check what composes, then split the sequences (docs/engine.md)."""

from __future__ import annotations

from typing import Any

from planner.contract.engine_config import EngineConfig
from planner.errors import UserInputError

from .apply import ContextParallel, apply_context_parallel


def start_context_parallel(model: Any, settings: EngineConfig, weights: Any, device: Any) -> ContextParallel:
    """Fill the model if it is on the meta device, switch its attention to the cp one, return the groups."""
    import torch.distributed as dist

    block, layout = settings.hardware_selector, settings.hardware_selector.layout
    if layout.tp > 1 or layout.pp > 1 or layout.ep > 1:
        raise UserInputError(
            f"layout {layout.describe()}: context parallelism composes with data parallelism and ZeRO here; "
            "use tp, pp and ep 1"
        )
    if not hasattr(getattr(model, "config", None), "_attn_implementation") or not hasattr(model, "get_decoder"):
        raise UserInputError(
            f"layout.cp splits a transformers causal LM's sequences; {type(model).__name__} is not one"
        )
    if not dist.is_initialized() or dist.get_world_size() % layout.cp:
        world = dist.get_world_size() if dist.is_initialized() else 1
        raise UserInputError(
            f"layout.cp {layout.cp} splits each sequence over {layout.cp} ranks but the job has {world}; "
            f"start it under torchrun with a multiple of {layout.cp} ranks"
        )
    if weights is not None:
        from backends.runner.model_init import load_full

        load_full(model, weights, device)
    elif device.type == "cuda":
        model.cuda()
    context_parallel = apply_context_parallel(model, layout.cp, device.type)
    from backends.activation_checkpointing import apply_activation_checkpointing

    apply_activation_checkpointing(model, block.activation_checkpointing)
    return context_parallel
