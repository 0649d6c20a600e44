"""Time of our engine's compressed data-parallel gradient sum (int8 / onebit), per optimizer step.

backends/parts/compressed_sum.py sums a bucket of N elements over n ranks in two phases:
1. an all-to-all of the packed chunks (N x wire bytes per rank, of which (n-1)/n leave it) and one of their
   block scales; each rank decompresses the n chunks it received and adds them up (a reduce-scatter);
2. for an all-reduce (ZeRO-0) only: each rank compresses its summed chunk again and all-gathers it (and the
   scales): a ring all-gather of N x wire bytes.
The wire bytes per element are planner/gradient_compression.py's. Around the collectives, every element is
read and written by the compressing and decompressing torch ops at the GPU's memory bandwidth; PASS_BYTES
counts them op by op from compressed_sum.py (reads plus writes, views free), and tests/test_compression_plan.py
traces the ops of CompressedSum and checks the totals.

The engine sums at the accumulation boundary only (every ZeRO stage: backends/zero/stage1.py, stage2.py,
stage3.py reduce when `boundary`) and the compressed sum is synchronous (launch_reduce: "its collectives done by
now"), so all of it is on the step's critical path.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.contract.choices import GradientCompression
from planner.gradient_compression import SCALE_BYTES, wire_bytes
from planner.throughput.collectives import Group, Links, all_gather_s, all_to_all_s

F32, S = 4.0, SCALE_BYTES  # a fp32 element; a block scale per element

# Bytes read + written per bucket element by each op of compressed_sum.py (steady state: a residual is held).
_PAD = (4.0, 2 * F32)  # torch.zeros of the padded [n, length] rows; each rank's chunk copied in
_FEEDBACK = (3 * F32,)  # rows += residual
_RESIDUAL = (3 * F32,)  # residual = rows - decompress(compress(rows))
_COMPRESS = {
    # abs; amax per block; scale = amax / 127 and its clamp; rows / scale; round; clamp_; to int8
    GradientCompression.INT8: (2 * F32, F32 + S, 2 * S, 2 * S, 2 * F32 + S, 2 * F32, 2 * F32, F32 + 1),
    # abs; mean per block; signs (>= 0, a bool); to uint8; x bit weights; summed 8 to a byte
    GradientCompression.ONEBIT: (2 * F32, F32 + S, F32 + 1, 2.0, 2.0, 1 + 1 / 8),
}
_DECOMPRESS = {
    # to float32; x scale
    GradientCompression.INT8: (1 + F32, 2 * F32 + S),
    # & bit weights; != 0; to float32; x 2; - 1; x scale
    GradientCompression.ONEBIT: (1 / 8 + 1, 2.0, 1 + F32, 2 * F32, 2 * F32, 2 * F32 + S),
}
_GATHERED = {GradientCompression.INT8: 2.0, GradientCompression.ONEBIT: 2 / 8}  # torch.cat of the gathered values


@dataclass(frozen=True)
class PassBytes:
    """Memory traffic per bucket element: `per_element` + `per_rank_share` / n."""

    per_element: float
    per_rank_share: float

    def at(self, ranks: int) -> float:
        return self.per_element + self.per_rank_share / ranks


def pass_bytes(compression: GradientCompression, all_reduce: bool, grad_bytes: int) -> PassBytes:
    """Bytes each bucket element costs in memory traffic on one rank, per sum. grad_bytes: the width of the
    bucket's gradients (a 16-bit bucket is cast to fp32 first: read 2, write 4)."""
    cast = grad_bytes + F32 if grad_bytes != 4 else 0.0
    compress, decompress = sum(_COMPRESS[compression]), sum(_DECOMPRESS[compression])
    # Phase 1 on the whole bucket: pad, feedback, compress, residual (a decompress), decompress what arrived;
    # the sum over the n received rows reads them all and writes one row.
    per_element = cast + sum(_PAD) + sum(_FEEDBACK) + compress + decompress + sum(_RESIDUAL) + decompress + F32
    per_share = F32
    if all_reduce:
        # Phase 2: the summed chunk (1/n of the bucket) padded, fed back, compressed, its residual kept; then
        # the n gathered chunks joined (values and scales) and decompressed (the whole bucket).
        per_share += sum(_PAD) + sum(_FEEDBACK) + compress + decompress + sum(_RESIDUAL)
        per_element += _GATHERED[compression] + 2 * S + decompress
    return PassBytes(per_element, per_share)


@dataclass(frozen=True)
class CompressedReduction:
    wire_s: float  # the collectives
    passes_s: float  # compress / decompress at memory bandwidth

    @property
    def total_s(self) -> float:
        return self.wire_s + self.passes_s


def compressed_reduction(
    compression: GradientCompression,
    links: Links,
    group: Group,
    elements: float,
    *,
    all_reduce: bool,
    grad_bytes: int,
    memory_Bps: float,
) -> CompressedReduction:
    """One compressed sum of `elements` gradient elements per rank over `group` (ZeRO-0: all_reduce)."""
    if group.size <= 1 or elements <= 0:
        return CompressedReduction(0.0, 0.0)
    packed = elements * wire_bytes(compression)
    # Values and scales travel in collectives of their own: one more latency each.
    latency = links.inter_latency_s if group.nodes > 1 else links.intra_latency_s
    wire = all_to_all_s(links, group, packed) + latency
    if all_reduce:
        wire += all_gather_s(links, group, packed) + latency
    passes = elements * pass_bytes(compression, all_reduce, grad_bytes).at(group.size) / memory_Bps
    return CompressedReduction(wire, passes)


def compression_sources(compression: GradientCompression, zero_stage: int, ranks: int, grad_bytes: int) -> dict:
    """The throughput sources a compressed plan carries, with its counts."""
    from planner.gradient_compression import reduction_words, wire_source

    all_reduce = zero_stage == 0
    passes = pass_bytes(compression, all_reduce, grad_bytes).at(max(ranks, 1))
    shape = "an all-to-all, then an all-gather," if all_reduce else "an all-to-all"
    what = (
        f"{wire_source(compression)}: the data-parallel {reduction_words(zero_stage, compression)} as {shape} of the packed "
        f"chunks instead of a ring, plus {passes:.0f} bytes/element of compress/decompress memory traffic at the "
        "GPU's bandwidth (counted from its torch ops, traced by tests/test_compression_plan.py); once per step, "
        "not overlapped with backward"
    )
    return {"compression": what, "data_parallel_comm_s": what}
