"""Selective activation checkpointing for the memory traces (Korthikanti et al.'s sense).

HF transformers has no selective mode, so the trace wraps the attention function
a model calls (the "sdpa" entry of transformers' AttentionInterface, or the
modeling module's `eager_attention_forward`) in a non-reentrant
`torch.utils.checkpoint`: the attention core (q·kᵀ, softmax, dropout, ·v, or
the SDPA kernel) is recomputed in backward and only its inputs are kept.
"""

from __future__ import annotations

from unittest import mock


def _checkpointed(attention_function):
    """The attention function, recomputed in backward (keeps only its tensor inputs)."""
    import torch.utils.checkpoint

    def selective(module, query, key, value, attention_mask, **kwargs):
        def core(q, k, v, mask):
            return attention_function(module, q, k, v, mask, **kwargs)

        # No RNG state to restore under FakeTensorMode; memory is the same either way.
        return torch.utils.checkpoint.checkpoint(
            core, query, key, value, attention_mask, use_reentrant=False, preserve_rng_state=False
        )

    return selective


def checkpoint_attention(stack, model) -> None:
    """Patch the attention functions `model` calls with checkpointed ones, for the step."""
    import sys

    from transformers.modeling_utils import AttentionInterface

    modeling = sys.modules[type(model).__module__]
    eager = getattr(modeling, "eager_attention_forward", None)
    if eager is None:
        raise ValueError(f"{type(model).__name__}: no eager_attention_forward to checkpoint (selective)")
    stack.enter_context(mock.patch.object(modeling, "eager_attention_forward", _checkpointed(eager)))
    sdpa = AttentionInterface._global_mapping["sdpa"]
    stack.enter_context(mock.patch.dict(AttentionInterface._global_mapping, {"sdpa": _checkpointed(sdpa)}))
