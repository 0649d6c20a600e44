"""Synthetic token sequences: the data of a smoke test (a run folder emitted without --data)."""

from __future__ import annotations

from typing import Any


class SyntheticTokens:
    """`size` deterministic random token sequences (sample i never depends on anything but seed and i)."""

    def __init__(self, size: int, seq_len: int, vocab_size: int, seed: int = 0):
        self.size, self.seq_len, self.vocab_size, self.seed = size, seq_len, vocab_size, seed

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Any:
        import torch

        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        return torch.randint(0, self.vocab_size, (self.seq_len,), generator=generator)
