"""What the planner knows of our engine's compressed gradient sums: their bytes, their measured loss, their warm-up.

Our engine's ZeRO reductions can carry int8 gradients over the data-parallel group, and onebit is 1-bit Adam
on ZeRO-0: after a warm-up of AdamW on exact gradient sums, Adam's variance is frozen and each rank's momentum,
not its gradient, is summed in signs (engine.json's `hardware_selector.compression`; backends/parts/compression.py,
compressed_sum.py and onebit_adam.py; docs/parallelism.md, "Gradient compression"). Each rank cuts a bucket into one chunk per rank, compresses each with a fp32 scale per
block of 128 elements, and sends chunk j to rank j (an all-to-all); each rank sums what it received (a
reduce-scatter: ZeRO-1/2/3 stop here) and, for ZeRO-0's all-reduce, compresses its summed chunk again and
all-gathers it. What compression drops is kept per bucket and added to the next sum (error feedback).

The throughput estimate (planner/throughput/compressed_reduction.py) and the memory estimate
(planner/memory/compression_buffers.py) count from these figures; the search (planner/search/compression.py)
decides where to compress.
"""

from __future__ import annotations

from planner.contract.choices import GradientCompression

BLOCK = 128  # elements per fp32 scale (backends/parts/compressed_sum.py, Compressor.BLOCK)
SCALE_BYTES = 4 / BLOCK  # a fp32 scale per block, per element
# Bytes per gradient element on the wire: the packed values (int8: one byte; onebit: signs 8 to a byte) and the
# block scales. tests/test_compressed_sum.py measures 1.03 and 0.156 from the tensors handed to the collectives.
WIRE_BYTES = {
    GradientCompression.INT8: 1 + SCALE_BYTES,
    GradientCompression.ONEBIT: 1 / 8 + SCALE_BYTES,
}
CODE = "backends/parts/compressed_sum.py"
MEASURED = 'tests/test_compressed_sum.py, docs/parallelism.md "Gradient compression"'
# The tiny GPT on dp2, Adam, 200 steps, mean loss of the last 10 against uncompressed (MEASURED). onebit's is
# below, from the frozen variance (with exact momentum sums it ends at -69%); the 1-bit sums cost +76% against that
# exact run.
MEASURED_LOSS_GAP = {
    GradientCompression.INT8: "+0.2% (ZeRO-1)",
    GradientCompression.ONEBIT: "-45% (ZeRO-0)",
}
# onebit's first optimizer steps are AdamW on exact gradient sums (1-bit Adam's freeze_step): the measured run's share, 40 of
# its 200 steps (tests/compression_runs.py), of the run's steps where the run folder knows them (--steps), else
# the measured run's 40. int8 was measured without a warm-up and gets none.
ONEBIT_WARMUP_SHARE = 0.2
ONEBIT_WARMUP_STEPS = 40


def wire_bytes(compression: GradientCompression) -> float:
    return WIRE_BYTES[compression]


def wire_source(compression: GradientCompression) -> str:
    """The source every compressed figure carries."""
    return f"formula ({compression.value} gradients: {WIRE_BYTES[compression]:.3g} bytes/element, {CODE})"


def warmup_steps(compression: GradientCompression, run_steps: int | None) -> int:
    """engine.json's compression_warmup_steps for a planned run of `run_steps` optimizer steps (None: unknown)."""
    if compression is not GradientCompression.ONEBIT:
        return 0
    if run_steps is None:
        return ONEBIT_WARMUP_STEPS
    return max(1, round(run_steps * ONEBIT_WARMUP_SHARE))


def warmup_rule() -> str:
    return (
        f"onebit: {ONEBIT_WARMUP_SHARE:.0%} of the run's steps summed uncompressed first (--steps; "
        f"{ONEBIT_WARMUP_STEPS} when the run's length is not known at --emit), as in the measured run "
        "(tests/compression_runs.py: 40 of 200)"
    )


def onebit_warning() -> str:
    """The line a plan with onebit carries; its source inside the sentence, so that the plan table (which drops
    a reason's trailing [source] without --explain) prints it too."""
    return (
        "warning: onebit is 1-bit Adam, another optimizer: after its warm-up Adam's variance is frozen and the "
        "ranks' momenta are summed in signs; on a tiny GPT over 200 steps its loss ended "
        f"{MEASURED_LOSS_GAP[GradientCompression.ONEBIT]} against uncompressed AdamW (the frozen variance; the "
        f"1-bit sums cost +76% against exact ones), int8's {MEASURED_LOSS_GAP[GradientCompression.INT8]} "
        f"(measured: {MEASURED}); --compression auto never picks it"
    )


def reduction_words(zero_stage: int, compression: GradientCompression | None = None) -> str:
    """What a compressed reduction is at a ZeRO stage (backends/zero/optimizer.py, launch_reduce; onebit:
    backends/parts/onebit_adam.py, ZeRO-0 only)."""
    if compression is GradientCompression.ONEBIT:
        return "momentum all-reduce (1-bit Adam after its warm-up; ZeRO-0: an all-to-all, then an all-gather)"
    if zero_stage == 0:
        return "gradient all-reduce (ZeRO-0: an all-to-all, then an all-gather)"
    return f"gradient reduce-scatter (ZeRO-{zero_stage}: the all-to-all alone)"


def applies_to(compression: GradientCompression, zero_stage: int, zero_ranks: int) -> str:
    """One sentence: what is compressed in this plan, and what is not."""
    return (
        f"{compression.value} compression on the data-parallel {reduction_words(zero_stage, compression)} over "
        f"{zero_ranks} ranks, {WIRE_BYTES[compression]:.3g} bytes per element on the wire, with fp32 "
        "error-feedback residuals; tensor-, pipeline-, context- and expert-parallel traffic and ZeRO's parameter "
        "all-gathers are not compressed"
    )
