"""Activation checkpointing through torch.utils.checkpoint: full (each block) or selective (its attention).

The wrapped forward is the module's own `forward`, so module hooks (ZeRO-3's
gather and free) still run once around the call and not again during the
recomputation inside backward.
"""

from __future__ import annotations

import functools
from typing import Any

MODES = ("none", "selective", "full")


def _recompute_in_backward(module: Any) -> None:
    from torch import is_grad_enabled
    from torch.utils.checkpoint import checkpoint

    original = module.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        if not is_grad_enabled():
            return original(*args, **kwargs)
        return checkpoint(original, *args, use_reentrant=False, **kwargs)

    module.forward = functools.wraps(original)(forward)


def _attention_of(block: Any) -> Any:
    for name, child in block.named_children():
        if "attn" in name or "attention" in name:
            return child
    raise ValueError(f"selective checkpointing found no attention module in {type(block).__name__}")


def apply_activation_checkpointing(model: Any, mode: str, blocks: list | None = None) -> list:
    """Recompute each block (full) or its attention (selective) in backward; returns the blocks wrapped.

    The blocks are the children of the model's largest ModuleList (a transformer's layers), or `blocks`.
    A model without repeated blocks is an error, never a silent no-op."""
    from backends.decoder_anatomy import repeated_blocks
    from planner.errors import UserInputError

    if mode not in MODES:
        raise ValueError(f"activation_checkpointing must be one of {MODES}")
    if mode == "none":
        return []
    found = list(blocks) if blocks is not None else repeated_blocks(model)
    if not found:
        raise UserInputError(
            f"activation checkpointing found no repeated block in {type(model).__name__} (no ModuleList of layers); "
            "pass blocks=[...] with the modules to recompute"
        )
    for block in found:
        _recompute_in_backward(block if mode == "full" else _attention_of(block))
    return found


apply = apply_activation_checkpointing  # activation_checkpointing.apply(model, "full") for any model
