"""Activation checkpointing through torch.utils.checkpoint: full (each block), op (each block, keeping every
second matmul's output: op_checkpoint_policy.py) or selective (its attention).

The wrapped forward is the module's own `forward`, so module hooks (ZeRO-3's
gather and free) still run once around the call and not again during the
recomputation inside backward.
"""

from __future__ import annotations

import functools
from typing import Any

MODES = ("none", "selective", "op", "full")
APPLIED = "_hardware_selector_activation_checkpointing"  # the mode apply() put on a model (plan_check reads it)


def transformers_checkpointing_on(model: Any) -> bool:
    """Whether a transformers model inside `model` has its own gradient checkpointing on (whole blocks recomputed:
    `gradient_checkpointing_enable()`, or the Trainer's argument)."""
    modules = model.modules() if hasattr(model, "modules") else [model]
    return any(_checkpointing_flag(module) is True for module in modules)


def _checkpointing_flag(module: Any) -> Any:
    """transformers 5's `is_activation_checkpointing`, else the older `is_gradient_checkpointing` (reading the old
    name on a new model warns that it is deprecated: an audit saw the warning on every `train`)."""
    name = "is_activation_checkpointing" if hasattr(type(module), "is_activation_checkpointing") else None
    return getattr(module, name or "is_gradient_checkpointing", False)


def applied_mode(model: Any) -> str:
    """The activation checkpointing `model` already recomputes with: what apply() gave it or a module inside it,
    else "full" when transformers' own is on (whole blocks), else "none"."""
    modules = model.modules() if hasattr(model, "modules") else [model]
    ours = next((getattr(module, APPLIED) for module in modules if hasattr(module, APPLIED)), None)
    return ours or ("full" if transformers_checkpointing_on(model) else "none")


def _recompute_in_backward(module: Any, keep_matmuls: bool = False) -> None:
    from torch import is_grad_enabled
    from torch.utils.checkpoint import checkpoint, noop_context_fn

    from backends.parts.op_checkpoint_policy import op_checkpoint_contexts

    original = module.forward
    contexts = op_checkpoint_contexts if keep_matmuls else noop_context_fn

    def forward(*args: Any, **kwargs: Any) -> Any:
        if not is_grad_enabled():
            return original(*args, **kwargs)
        args, kwargs = _without_kv_cache(args, kwargs)
        return checkpoint(original, *args, use_reentrant=False, context_fn=contexts, **kwargs)

    module.forward = functools.wraps(original)(forward)


def _without_kv_cache(args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """The block's arguments without transformers' KV cache (GPT-2 passes it by position, Llama by name). A model called without use_cache=False
    hands each block its cache: the checkpoint would keep it (every layer's keys and values) alive until
    backward, and the recomputation would append the keys again (and change the op sequence op-level
    checkpointing replays). Training never reads the cache, so a checkpointed block runs without it, as
    transformers' own gradient checkpointing does (use_cache=False)."""
    from transformers.cache_utils import Cache

    return (
        tuple(None if isinstance(value, Cache) else value for value in args),
        {name: None if isinstance(value, Cache) else value for name, value in kwargs.items()},
    )


def _attention_of(block: Any) -> Any:
    for name, child in block.named_children():
        if "attn" in name or "attention" in name:
            return child
    from planner.errors import UserInputError

    raise UserInputError(
        f"selective checkpointing found no attention module in {type(block).__name__}; use full checkpointing"
    )


def _blocks_of(model: Any) -> list[Any]:
    """The repeated blocks: the largest ModuleList's children, and an encoder-decoder's both stacks (T5's encoder
    and decoder blocks, BART's and Whisper's layers: the two largest lists, which the memory estimate counts)."""
    import torch

    from backends.decoder_anatomy import repeated_blocks

    if not getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        return repeated_blocks(model)
    lists = [module for module in model.modules() if isinstance(module, torch.nn.ModuleList)]
    lists.sort(key=lambda blocks: sum(p.numel() for p in blocks.parameters()), reverse=True)
    return [block for blocks in lists[:2] for block in blocks]


def apply_activation_checkpointing(model: Any, mode: str, blocks: list | None = None) -> list:
    """Recompute each block (full, op) or its attention (selective) in backward; returns the blocks wrapped.

    The blocks are the children of the model's largest ModuleList (a transformer's layers; both stacks of an
    encoder-decoder), or `blocks`. A model without repeated blocks is an error, never a silent no-op; so is a
    second mode on a model that carries one (the two would nest), while the same mode again changes nothing."""
    from planner.errors import UserInputError

    if mode not in MODES:
        raise ValueError(f"activation_checkpointing must be one of {MODES}")
    if mode == "none":
        return []
    found = list(blocks) if blocks is not None else _blocks_of(model)
    already = applied_mode(model)  # ours, or transformers' own (full)
    if already == mode:
        return found
    if already != "none":
        theirs = " (transformers' gradient checkpointing)" if transformers_checkpointing_on(model) else ""
        raise UserInputError(
            f"activation checkpointing {mode} on {type(model).__name__}, which already recomputes as {already}{theirs}: "
            "the two would nest; build the model afresh, or drop gradient_checkpointing_enable(), for another mode"
        )
    if not found:
        raise UserInputError(
            f"activation checkpointing found no repeated block in {type(model).__name__} (no ModuleList of layers); "
            "pass blocks=[...] with the modules to recompute"
        )
    targets = [_attention_of(block) for block in found] if mode == "selective" else found  # (refused before any)
    for target in targets:
        _recompute_in_backward(target, keep_matmuls=mode == "op")
    object.__setattr__(model, APPLIED, mode)  # a plain attribute, not a submodule or a parameter
    return found


apply = apply_activation_checkpointing  # activation_checkpointing.apply(model, "full") for any model
