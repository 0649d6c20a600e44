"""The zig-zag split of a sequence over cp ranks (the causal mask's load balanced).

A sequence of s tokens is cut into 2 x cp chunks; rank r keeps chunks r and 2cp-1-r, so every rank has
one early chunk (few keys to attend to) and one late one (many): equal attention work under the causal
mask. Labels are shifted over the whole sequence before the split (the next token of a chunk's last
token lives on another rank), and positions are kept, so rotary embeddings see true positions.
"""

from __future__ import annotations

import torch


def chunk_indices(seq_len: int, cp: int, rank: int) -> torch.Tensor:
    """Positions rank `rank` holds, in order: chunk rank, then chunk 2cp-1-rank."""
    if seq_len % (2 * cp):
        raise ValueError(f"sequence length {seq_len} is not a multiple of 2 x cp = {2 * cp}")
    size = seq_len // (2 * cp)
    first, second = rank * size, (2 * cp - 1 - rank) * size
    return torch.cat([torch.arange(first, first + size), torch.arange(second, second + size)])


def shifted_labels(labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """labels[t + 1] at t, ignore_index at the end: what a causal LM predicts at each position."""
    tail = torch.full_like(labels[:, :1], ignore_index)
    return torch.cat([labels[:, 1:], tail], dim=1)
