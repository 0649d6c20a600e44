"""The data-parallel micro-batch stream: deterministic, and it resumes exactly mid-epoch.

The stream is a pure function of (seed, global sample position). Each epoch
visits the samples in a seeded permutation; the k-th micro-step of the job
takes positions [k*m*w, (k+1)*m*w) of that order (m = micro batch, w =
data-parallel ranks) and rank r takes its m of them. An optimizer step of
global batch G = m*a*w therefore always consumes positions [s*G, (s+1)*G),
however G is split into micro-batches, accumulation and ranks: resuming from
a checkpoint's sample position continues exactly where the interrupted run
stopped, at any world size that keeps the global batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def epoch_order(size: int, epoch: int, seed: int, shuffle: bool) -> Any:
    """The sample order of one epoch, as an int64 tensor (8 bytes a sample, never a Python list)."""
    import torch

    if not shuffle:
        return torch.arange(size)
    return torch.randperm(size, generator=torch.Generator().manual_seed(seed + epoch))


def micro_batches(
    dataset: Any,
    *,
    micro_batch: int,
    rank: int,
    world: int,
    start_sample: int = 0,
    seed: int = 0,
    shuffle: bool = True,
    global_batch: int | None = None,
) -> Iterator[Any]:
    """This rank's micro-batches (stacked tensors), from global position `start_sample` on, epoch after epoch.

    global_batch (a multiple of micro_batch x world): each epoch keeps a whole number of optimizer steps,
    so the order does not depend on how the global batch is split (default: whole micro-steps)."""
    import torch

    size = len(dataset)
    per_step = micro_batch * world
    whole = global_batch or per_step
    if whole % per_step:
        raise ValueError(f"global batch {whole} is not a multiple of micro batch x ranks ({per_step})")
    if size < whole:
        raise ValueError(f"dataset of {size} samples is smaller than one step across ranks ({whole})")
    usable = epoch_length(size, whole)  # drop each epoch's ragged tail, like drop_last=True
    position, order_epoch, order = start_sample, -1, None
    while True:
        epoch, offset = divmod(position, usable)
        if epoch != order_epoch:
            order_epoch, order = epoch, epoch_order(size, epoch, seed, shuffle)
        mine = order[offset + rank * micro_batch : offset + (rank + 1) * micro_batch].tolist()
        yield torch.stack([dataset[index] for index in mine])
        position += per_step


def epoch_length(size: int, whole: int) -> int:
    """Samples one epoch consumes when it keeps whole groups of `whole` samples (the ragged tail is dropped)."""
    return size - size % whole
