"""Synthetic token data and a data-parallel micro-batch stream that resumes mid-epoch.

The stream is a pure function of (seed, global sample position): the k-th
micro-step of the job uses samples [k*m*w, (k+1)*m*w) of the global order
(m = micro batch, w = data-parallel ranks) and rank r takes its m of them.
So resuming from the engine's `global_samples` continues exactly where the
interrupted run stopped, at any world size that keeps m*w the same.
"""

from __future__ import annotations

from typing import Any, Iterator


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


def epoch_order(size: int, epoch: int, seed: int, shuffle: bool) -> list[int]:
    import torch

    if not shuffle:
        return list(range(size))
    return torch.randperm(size, generator=torch.Generator().manual_seed(seed + epoch)).tolist()


def micro_batches(dataset: Any, *, micro_batch: int, rank: int, world: int, start_sample: int = 0,
                  seed: int = 0, shuffle: bool = True) -> Iterator[Any]:
    """This rank's micro-batches (stacked tensors), from global position `start_sample` on, epoch after epoch."""
    import torch

    size = len(dataset)
    per_step = micro_batch * world
    if size < per_step:
        raise ValueError(f"dataset of {size} samples is smaller than one micro-step across ranks ({per_step})")
    usable = size - size % per_step  # drop each epoch's ragged tail, like drop_last=True
    position, order_epoch, order = start_sample, -1, []
    while True:
        epoch, offset = divmod(position, usable)
        if epoch != order_epoch:
            order_epoch, order = epoch, epoch_order(size, epoch, seed, shuffle)
        mine = order[offset + rank * micro_batch: offset + (rank + 1) * micro_batch]
        yield torch.stack([dataset[index] for index in mine])
        position += per_step
