"""Fixed-length training blocks over a token file: block i is tokens [i*L, (i+1)*L).

Documents are packed end to end with an EOS between them, so a block may
span two documents (the usual packing of causal-LM pre-training and
fine-tuning); the tail shorter than one block is dropped. A subset view
(`Blocks.subset`) holds only block indices, so the train and evaluation
splits of one file share its memory map.
"""

from __future__ import annotations

from typing import Any


class Blocks:
    """A map-style dataset of int64 token blocks, read from a (memory-mapped) token array."""

    def __init__(self, tokens: Any, seq_len: int, indices: Any | None = None):
        self.tokens = tokens
        self.seq_len = seq_len
        self.total = len(tokens) // seq_len
        self.indices = indices  # a torch int64 tensor of block numbers, or None for all of them

    def __len__(self) -> int:
        return self.total if self.indices is None else len(self.indices)

    def block_number(self, index: int) -> int:
        return index if self.indices is None else int(self.indices[index])

    def __getitem__(self, index: int) -> Any:
        import numpy as np
        import torch

        start = self.block_number(index) * self.seq_len
        return torch.from_numpy(np.asarray(self.tokens[start : start + self.seq_len], dtype=np.int64))

    def subset(self, indices: Any) -> Blocks:
        return Blocks(self.tokens, self.seq_len, indices)


def eval_block_count(total: int, fraction: float, cap: int) -> int:
    """How many blocks to hold out: `fraction` of them, at least one when asked for any, at most `cap`."""
    if fraction <= 0 or cap <= 0 or total < 2:
        return 0
    return max(1, min(cap, round(total * fraction), total - 1))


def split_blocks(blocks: Blocks, fraction: float, cap: int, seed: int) -> tuple[Blocks, Blocks | None]:
    """(train, held-out) blocks: a seeded random choice of blocks, the rest in file order."""
    import torch

    count = eval_block_count(len(blocks), fraction, cap)
    if count == 0:
        return blocks, None
    chosen = torch.randperm(len(blocks), generator=torch.Generator().manual_seed(seed + 7919))[:count]
    held = torch.zeros(len(blocks), dtype=torch.bool)
    held[chosen] = True
    everything = torch.arange(len(blocks))
    return blocks.subset(everything[~held]), blocks.subset(everything[held])
