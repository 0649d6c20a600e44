"""Each data-parallel scheme's communication per optimizer step, at one micro-batch of a layout.

The schemes are communication.py's (its module docstring says how each
implementation reduces gradients and gathers parameters); their collectives'
sizes are the layout's and are costed once in its CommunicationPlan, so what
is left per micro-batch is how much of them the step waits for, which depends
on the accumulation and the micro-batch's forward and backward time. Each
function returns (total DP traffic per step, what the step waits for of it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.throughput.communication_plan import CommunicationPlan


def waited_s(comm: float, window: float, interference: float) -> float:
    """Exposed time of `comm` seconds of traffic overlapped with `window` seconds of compute:
    max(0.0, comm - window) + interference * min(comm, window), written out (the same values: max and min
    return their first argument unless a later one is larger, or smaller) without two calls per candidate."""
    excess = comm - window
    return (excess if excess > 0.0 else 0.0) + interference * (window if window < comm else comm)


def compressed_scheme(plan: CommunicationPlan, accum: int, fwd: float, bwd: float, blocks: int) -> tuple[float, float]:
    """Our engine's compressed sum, once per step at the boundary, plus ZeRO's parameter all-gathers."""
    dp_total = exposed = plan.summed
    if plan.stage_zero in (1, 2):
        dp_total += plan.updated
        exposed += plan.updated
    elif plan.stage_zero == 3:
        gather, interference = plan.gather, plan.interference
        dp_total += accum * 2 * gather
        exposed += accum * (
            gather / max(blocks, 1) + waited_s(gather, fwd, interference) + waited_s(gather, bwd, interference)
        )
    return dp_total, exposed


def all_reduce_scheme(plan: CommunicationPlan, accum: int, fwd: float, bwd: float, blocks: int) -> tuple[float, float]:
    """DDP, FSDP NO_SHARD, ZeRO-0: one all-reduce per step in buckets under the last backward."""
    all_reduce, last_bucket = plan.all_reduce, plan.last_bucket
    return all_reduce, last_bucket + waited_s(all_reduce - last_bucket, bwd, plan.interference)


def grad_op_scheme(plan: CommunicationPlan, accum: int, fwd: float, bwd: float, blocks: int) -> tuple[float, float]:
    """FSDP SHARD_GRAD_OP: parameters gathered once per micro-batch, gradients reduce-scattered after each."""
    gather, reduce, interference = plan.gather, plan.reduce, plan.interference
    first_block = gather / max(blocks, 1)
    exposed = accum * (first_block + waited_s(gather, fwd, interference) + waited_s(reduce, bwd, interference))
    return accum * (reduce + gather), exposed


def partitioned_scheme(plan: CommunicationPlan, accum: int, fwd: float, bwd: float, blocks: int) -> tuple[float, float]:
    """ZeRO-1 (one reduce-scatter per step) and ZeRO-2 (one per micro-batch), then the updated partitions'
    all-gather."""
    reduces = 1 if plan.stage_zero == 1 else accum
    exposed = reduces * waited_s(plan.reduce, bwd, plan.interference) + plan.updated
    return reduces * plan.reduce + plan.updated, exposed


def sharded_scheme(plan: CommunicationPlan, accum: int, fwd: float, bwd: float, blocks: int) -> tuple[float, float]:
    """ZeRO-3, FSDP FULL_SHARD and HYBRID_SHARD: every micro-batch gathers the parameters in forward and in
    backward and reduce-scatters the gradients (hybrid: and all-reduces the shards across nodes; ZeRO++: the
    backward's gather inside the node, zeropp.py)."""
    gather, reduce, cross, interference = plan.gather, plan.reduce, plan.cross, plan.interference
    gather_backward = gather if plan.gather_backward is None else plan.gather_backward
    first_block = gather / max(blocks, 1)
    dp_total = accum * (gather + gather_backward + reduce + cross)
    exposed = accum * (
        first_block
        + waited_s(gather, fwd, interference)
        + waited_s(gather_backward + reduce + cross, bwd, interference)
    )
    return dp_total, exposed
