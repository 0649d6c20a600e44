"""The global batch, and the micro-batch x gradient-accumulation pairs that make it up.

Every layout is compared at the same global batch (tokens per step), so that
no plan looks faster only because it accumulates more micro-batches per
data-parallel exchange. micro x accum x dp must equal it; each micro-batch that
divides global/dp gives exactly one pair.
"""

from __future__ import annotations

import math
from functools import lru_cache

from planner.search.request import PlanRequest
from planner.search.strategy_layout import divisors

# Default step size when the user gives neither a global nor a micro-batch:
# about 2**20 tokens, inside the 0.5M-4M-token batches GPT-3 (Brown et al. 2020,
# Table 2.1) and Llama 2 (4M) trained with.
DEFAULT_TOKENS_PER_STEP = 2**20
# Micro-batches a pipeline stage needs in flight: 4 per stage keeps the 1F1B
# bubble (p-1)/m under 20% (Narayanan et al. 2021).
MICRO_BATCHES_PER_STAGE = 4


def resolve_global_batch(request: PlanRequest, world_size: int) -> tuple[int, str | None]:
    """(global batch, how it was chosen when the user did not give it)."""
    if request.global_batch is not None:
        return request.global_batch, None
    if request.micro_batch is not None:
        batch = request.micro_batch * world_size
        return (
            batch,
            f"global batch {batch} = micro-batch {request.micro_batch} x {world_size} GPUs (no --global-batch given)",
        )
    sequences = _default_per_gpu(DEFAULT_TOKENS_PER_STEP / request.seq_len / world_size) * world_size
    return sequences, (
        f"global batch {sequences} sequences = about {sequences * request.seq_len / 1e6:.1f}M tokens per step "
        f"(default ~1M, GPT-3/Llama range; set --global-batch)"
    )


def _default_per_gpu(exact: float) -> int:
    """Sequences per GPU near `exact`: the nearest multiple of 8, else of 4, else of 2, within an eighth of it, else
    `exact` rounded up. A prime count (whisper's 448 tokens on 8 GPUs gave 293) left micro-batch 1 as the only
    split, 10% slower than 8 x 37 (an audit); rounding up to 8 alone took 24 GPUs at 4k tokens to 1.6M tokens a
    step, not ~1M (a review)."""
    for multiple in (8, 4, 2):
        near = max(multiple, round(exact / multiple) * multiple)
        if abs(near - exact) <= exact / 8:
            return near
    return max(1, math.ceil(exact))


def batch_options(
    request: PlanRequest, global_batch: int, dp: int, pipeline_stages: int = 1, accumulation_multiple: int = 1
) -> list[tuple[int, int]]:
    """(micro_batch, grad_accum) pairs, ascending in micro-batch; empty if none is possible.

    A pipeline needs at least one micro-batch per stage (TrainingConfig checks
    the same), so with pp > 1 the accumulation count is at least pp.
    """
    options = _options(
        global_batch, dp, pipeline_stages, accumulation_multiple, request.micro_batch, request.max_micro_batch
    )
    return list(options)


@lru_cache(maxsize=4096)
def _options(
    global_batch: int,
    dp: int,
    pipeline_stages: int,
    accumulation_multiple: int,
    micro_batch: int | None,
    max_micro_batch: int,
) -> tuple[tuple[int, int], ...]:
    """batch_options of these integers, remembered: the search asks again for every layout of a data-parallel
    size, on every cluster slice."""
    if global_batch % dp:
        return ()
    per_replica = global_batch // dp
    if micro_batch is not None:
        micros = [micro_batch] if per_replica % micro_batch == 0 else []
    else:
        micros = [m for m in divisors(per_replica) if m <= max_micro_batch]
    return tuple(
        (m, per_replica // m)
        for m in micros
        if per_replica // m >= pipeline_stages and (per_replica // m) % accumulation_multiple == 0
    )


def infeasible_batch_reason(request: PlanRequest, global_batch: int, dp: int, pipeline_stages: int = 1) -> str:
    if global_batch % dp:
        return f"global batch {global_batch} is not a multiple of its data-parallel size {dp}"
    if pipeline_stages > 1 and global_batch // dp < pipeline_stages * (request.micro_batch or 1):
        return (
            f"{pipeline_stages} pipeline stages need {pipeline_stages} micro-batches per step, but each "
            f"data-parallel replica gets {global_batch // dp} sequences"
        )
    return f"micro-batch {request.micro_batch} does not divide the {global_batch // dp} sequences per data-parallel replica"
