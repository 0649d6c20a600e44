"""Memory our engine's compressed gradient sums (int8 / onebit) hold on one rank (backends/parts/compressed_sum.py).

Held from the first compressed step on, per bucket (ZeRO unit), fp32 (error feedback, CompressedSum's dicts):
- the worker's residual: the bucket as n rows (one per rank), each padded to whole 128-element blocks: 4 bytes
  per gradient element the rank's units hold (unit_residual_elements counts the padding, which the estimate
  leaves out: at most n x 128 elements per bucket);
- the server's residual, only where the sum is an all-reduce (ZeRO-0: `all_reduce`'s second phase): its
  summed chunk's row, 4/n bytes per element.
During one bucket's sum (PEAK, bytes per element of the bucket, counted from the code's tensors and traced by
tests/test_compression_plan.py): the fp32 rows, the packed values and scales sent and received, and the
decompressed received values with their product by the scales; ZeRO-0's second phase holds the gathered values
and their decompressed copy instead. Every bucket's sum stays until the last one is copied into the gradient
shard (ZeRO.launch_reduce / finish_reduces): its whole fp32 sum under ZeRO-0, its 1/n chunk otherwise.
ZeRO-0/1 sum after backward, at the accumulation boundary; ZeRO-2/3 as each bucket's gradients arrive in the
boundary's backward.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.contract.choices import GradientCompression
from planner.gradient_compression import BLOCK, SCALE_BYTES

F32, S = 4.0, SCALE_BYTES
# One bucket's peak during its sum, beyond the residuals, per bucket element (see the docstring):
# phase 1 (at decompressing what arrived): rows 4 + sent and received values + their scales + the decompressed
# values 4 and their scaled product 4 (onebit: the unpacked bits 1 and two fp32 temporaries of the unpacking);
PHASE1_PEAK = {
    GradientCompression.INT8: F32 + 2 * 1 + 2 * S + 2 * F32,
    GradientCompression.ONEBIT: F32 + 2 / 8 + 2 * S + 1 + 2 * F32,
}
# phase 2 (ZeRO-0, at decompressing the gathered chunks): (per element, per element / n): the gathered values,
# their joined copy, the joined scales and two fp32 temporaries; the summed chunk, its padded row and their
# packed values, a chunk's worth each.
PHASE2_PEAK = {
    GradientCompression.INT8: (2 * 1 + S + 2 * F32, 2 * F32 + 1),
    GradientCompression.ONEBIT: (2 / 8 + S + 1 + 2 * F32, 2 * F32 + 1 / 8),
}


def unit_residual_elements(numel: int, ranks: int, *, partitioned: bool) -> int:
    """fp32 residual elements one bucket of `numel` gradients holds, exactly as CompressedSum keeps them:
    partitioned (ZeRO-1/2/3) units are padded to a multiple of the ranks and reduce-scattered (the worker's rows
    alone); ZeRO-0's are all-reduced (also the server's row)."""
    padded = -(-numel // ranks) * ranks if partitioned else numel
    chunk = -(-padded // ranks)
    length = -(-chunk // BLOCK) * BLOCK
    return ranks * length + (0 if partitioned else length)


def peak_bytes_per_element(compression: GradientCompression, ranks: int, *, all_reduce: bool) -> float:
    """One bucket's transient bytes per element during its sum (beyond the residuals)."""
    peak = PHASE1_PEAK[compression]
    if all_reduce:
        per_element, per_share = PHASE2_PEAK[compression]
        peak = max(peak, per_element + per_share / ranks)
    return peak


@dataclass(frozen=True)
class CompressionMemory:
    residuals: float  # bytes held from step to step
    at_reduction: float  # bytes more while the buckets are summed
    note: str


def compression_memory(
    compression: GradientCompression, zero_stage: int, elements: float, ranks: int, largest_bucket: float
) -> CompressionMemory:
    """What compressed sums of `elements` gradient elements over `ranks` ranks hold, at most `largest_bucket`
    elements at a time."""
    all_reduce = zero_stage == 0
    residuals = F32 * elements * (1 + (1 / ranks if all_reduce else 0))
    sums = F32 * elements / (1 if all_reduce else ranks)
    at_reduction = sums + peak_bytes_per_element(compression, ranks, all_reduce=all_reduce) * largest_bucket
    server = f" + 4/{ranks} for ZeRO-0's second phase" if all_reduce else ""
    note = (
        f"{compression.value} gradient compression: fp32 error-feedback residuals, 4 bytes per gradient element"
        f"{server} ({residuals / 2**30:.2f} GiB), and {at_reduction / 2**30:.2f} GiB while the buckets are summed "
        "(backends/parts/compressed_sum.py)"
    )
    return CompressionMemory(residuals, at_reduction, note)
