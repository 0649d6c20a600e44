"""Attention over a sequence split across cp ranks: gather every rank's keys and values, attend causally.

Registered with transformers as the attention implementation "context_parallel" (and a mask function of
the same name that builds nothing: what a query may see depends on which positions each rank holds, known
here). Each rank computes its queries (its zig-zag chunks, at their true positions) against the keys and
values of the whole sequence, all-gathered over the cp group with autograd (their gradients are
reduce-scattered back in backward) and put in true order. Grouped key/value heads stay grouped (SDPA's
enable_gqa), so the exchange moves kv_heads, not heads.

No mask tensor: a chunk of L queries starting at true position p sees exactly the keys 0 .. p+L-1, the
last L of them causally, which is SDPA over the keys cut at p+L under torch's lower-right causal bias
(torch.nn.attention.bias.causal_lower_right). On CUDA that is flash attention, which takes the causal
alignment as a flag and keeps no mask (what planner/memory/activations.py counts); on the CPU torch builds
the chunk's boolean mask for each call (benchmarks/memory/trace_sharding.py traces the CUDA behaviour).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from backends.context_parallel.sharding import chunk_indices

NAME = "context_parallel"


def lower_right_causal_attention(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, **options: Any) -> Any:
    """One run of L consecutive queries against the keys up to its last position, the last L causally."""
    from torch.nn.attention.bias import causal_lower_right

    bias = causal_lower_right(query.shape[2], keys.shape[2])
    return torch.nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=bias, **options)


class ContextParallelAttention:
    """What the attention needs to know about the split: the group, and where each rank's tokens sit."""

    def __init__(self, group: Any, cp: int, chunk_kernel: Callable[..., torch.Tensor] | None = None):
        self.group, self.cp = group, cp
        # (query chunk, keys, values, **SDPA options) -> output; the memory traces pass CUDA's stand-in
        self.chunk_kernel = chunk_kernel or lower_right_causal_attention
        self.chunks: list[tuple[int, int, int]] = []  # (first query, end, keys it sees) of each chunk of this rank
        self._true_order: torch.Tensor | None = None  # gathered keys -> true order

    def set_split(self, seq_len: int, rank: int, device: Any = None) -> torch.Tensor:
        """This micro-batch's zig-zag split (sharding.py) for `rank`; returns the rank's positions. Arithmetic on
        the split, no data-dependent step, so it also runs under FakeTensorMode (the memory traces)."""
        every = [chunk_indices(seq_len, self.cp, other) for other in range(self.cp)]
        self._true_order = torch.argsort(torch.cat(every)).to(device)
        size = seq_len // (2 * self.cp)
        self.chunks = [(0, size, (rank + 1) * size), (size, 2 * size, (2 * self.cp - rank) * size)]
        return every[rank].to(device)

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

        assert self._true_order is not None, "set_split first"
        order = self._true_order.to(key.device)
        keys = funcol.wait_tensor(funcol.all_gather_single_autograd(key.contiguous(), 2, self.group))
        values = funcol.wait_tensor(funcol.all_gather_single_autograd(value.contiguous(), 2, self.group))
        keys, values = keys.index_select(2, order), values.index_select(2, order)  # in true order
        options = {
            "dropout_p": dropout if module.training else 0.0,
            "scale": scaling,
            "enable_gqa": query.shape[1] != keys.shape[1],
        }
        # (batch, tokens, heads, dim), as transformers' attention functions return: joined along the tokens, one
        # copy beside the kernels' outputs (planner/memory/activations.py counts it)
        output = torch.cat(
            [
                self.chunk_kernel(query[:, :, start:end], keys[:, :, :seen], values[:, :, :seen], **options).transpose(
                    1, 2
                )
                for start, end, seen in self.chunks
            ],
            dim=1,
        )
        return output.contiguous(), None


def register(attention: ContextParallelAttention) -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, lambda *args, **kwargs: None)
