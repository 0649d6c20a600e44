"""Attention over a sequence split across cp ranks: gather every rank's keys and values, mask causally.

Registered with transformers as the attention implementation "context_parallel" (and a mask function of
the same name that builds nothing: the mask depends on which positions each rank holds, known here). Each
rank computes its queries (its zig-zag chunks, at their true positions) against the keys and values of
the whole sequence, all-gathered over the cp group with autograd (their gradients are reduce-scattered
back in backward), under the causal mask of true positions. Grouped key/value heads are repeated after
the gather, so the exchange moves kv_heads, not heads.

The mask is additive, in the queries' dtype, built once per micro-batch and shared by every layer: a boolean
mask would be converted (and kept for backward) anew by each layer's SDPA call on CUDA. It still holds this
rank's tokens x the whole sequence (planner/memory/activations.py counts it); a ring-attention kernel that
needs no mask is not written yet.
"""

from __future__ import annotations

from typing import Any

import torch

NAME = "context_parallel"


class ContextParallelAttention:
    """What the attention needs to know about the split: the group, and where each token sits."""

    def __init__(self, group: Any, cp: int):
        self.group, self.cp = group, cp
        self.query_positions: torch.Tensor | None = None  # this rank's, set for each micro-batch
        self.key_positions: torch.Tensor | None = None  # every rank's, in gather order
        self._mask: torch.Tensor | None = None

    def set_positions(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> None:
        """This micro-batch's positions: this rank's queries, and every rank's keys in gather order."""
        self.query_positions, self.key_positions, self._mask = query_positions, key_positions, None

    def _additive_mask(self, query: torch.Tensor) -> torch.Tensor:
        """0 where a query may attend (a key at or before its true position), -inf elsewhere; one per micro-batch."""
        assert self.query_positions is not None and self.key_positions is not None
        if self._mask is None or self._mask.dtype != query.dtype or self._mask.device != query.device:
            allowed = self.key_positions[None, :] <= self.query_positions[:, None]
            blocked = torch.zeros(allowed.shape, dtype=query.dtype, device=query.device)
            self._mask = blocked.masked_fill_(~allowed.to(query.device), float("-inf"))
        return self._mask

    def __call__(
        self,
        module: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: Any,
        scaling: float | None = None,
        dropout: float = 0.0,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        import torch.distributed._functional_collectives as funcol

        keys = funcol.wait_tensor(funcol.all_gather_single_autograd(key.contiguous(), 2, self.group))
        values = funcol.wait_tensor(funcol.all_gather_single_autograd(value.contiguous(), 2, self.group))
        output = torch.nn.functional.scaled_dot_product_attention(
            query,
            keys,
            values,
            attn_mask=self._additive_mask(query),  # causal, by true position
            dropout_p=dropout if module.training else 0.0,
            scale=scaling,
            enable_gqa=query.shape[1] != keys.shape[1],
        )
        return output.transpose(1, 2).contiguous(), None


def register(attention: ContextParallelAttention) -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, lambda *args, **kwargs: None)
