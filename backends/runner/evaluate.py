"""Evaluation: the mean token loss over the held-out blocks, and its perplexity, split over data ranks.

Data-parallel rank r evaluates blocks r, r + W, r + 2W, ... in batches of
the micro-batch size. Ranks with fewer batches than the busiest one run
padding batches with weight zero, because sharded models (FSDP, ZeRO-3,
tensor and pipeline parallel) need every rank in every forward. The losses
are weighted by the blocks behind them and summed over the ranks, so the
result is the same whatever the world size.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from backends.adapters.base import Adapter


def evaluate(adapter: Adapter, blocks: Sequence[Any], make_batch: Callable[[list[Any]], dict]) -> dict[str, float]:
    import torch
    import torch.distributed as dist

    total, rank, world = len(blocks), adapter.data_rank, adapter.data_world
    mine = list(range(rank, total, world))
    busiest = -(-total // world)
    size = adapter.micro_batch
    batches = -(-busiest // size)
    loss_sum, weight_sum = 0.0, 0.0
    for number in range(batches):
        indices = mine[number * size : (number + 1) * size]
        weight = len(indices)
        if not indices:
            indices = [0]  # padding: keeps this rank in step with the others
        stacked = torch.stack([blocks[index] for index in indices])
        loss = adapter.eval_loss(make_batch(stacked, salt=indices[0]))
        loss_sum += loss * weight
        weight_sum += weight
    sums = torch.tensor([loss_sum, weight_sum], dtype=torch.float64, device=adapter.device)
    if adapter.distributed and world > 1:
        dist.all_reduce(sums, group=getattr(adapter, "data_group", None))
    mean = float(sums[0] / sums[1])
    return {"eval_loss": mean, "perplexity": math.exp(min(mean, 700.0)), "eval_blocks": total}
