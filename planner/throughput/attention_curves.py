"""How an attention kernel's rate grows with the sequence, where a measurement gives it by length.

A GPU's attention factor (library_efficiency.py) is read at one length; where a curve is measured, the factor
follows it (Implementation.attention_kernel). On Blackwell, cuDNN's kernel
(which Transformer Engine and torch 2.13's SDPA run there) reaches 1.5x more of the peak at 16k tokens than at 4k,
and FlashAttention-2 1.2x more: NVIDIA/cudnn-frontend's training-SDPA benchmark on a B200
(benchmark/sdpa_benchmark_training/artifacts/sdpa_bf16_benchmark_results_NVIDIA_B200.csv at 0b1577c8, 2025-10-10:
NGC PyTorch 25.09, cuDNN 9.13.1, CUDA 13; causal, batch 1, 128 query and 8 key-value heads, head dim 128, BF16;
median of 10 after 5 warm-up), whose forward and backward TFLOP/s are below as printed. Forward + backward is their
time-weighted pair (the backward counts 2.5 forwards, FlashAttention-2's count: docs/accuracy.md, "GPU library
efficiency").

On CDNA3 and CDNA4 the factor follows AMD's assembly kernels (aiter's README, below) the same way, from 4k tokens.

On Hopper the factor is FlashAttention-2's, one number at every length: FlashAttention-2's release charts
(Dao-AILab/flash-attention assets/flash2_{h100,a100}_fwd_bwd_benchmark.png at 4f285b3, 2023-07-17: forward +
backward, head dim 128, hidden 2048 (16 heads), batch x length 16k tokens, the bars' printed labels below) put the
H100 at 1.65-1.74x the A100 at every length from 512 to 16k tokens, causal or not, within 5% of the ratio at 16k
without the mask that the factor takes (tests/test_attention_curves.py). Both GPUs' own rates rise with the length (the A100's 155 to 189
TFLOP/s from 2k to 16k, causal), which the fitted A100 efficiency stands for at the lengths it was fitted on, so
the Hopper factor does not follow the H100's curve (docs/accuracy.md, "GPU library efficiency", says what following
it did to the published rows). The Hopper-native speedup that stacks running cuDNN's kernel
take there (implementation.py, HOPPER_NATIVE_ATTENTION_SPEEDUP, read at 4k) grows with the length as cuDNN's rate on
an H200 does: cuDNN 9.19 through its frontend, causal, 64 query and 8 key-value heads, head dim 128, BF16
(results/h200_919_only_cudnn/llama3.1_20260227_034703.csv at df73764a, 2026-03-09, the same folder; kernels timed
alone with the L2 flushed, so only its growth by length is used, not its level).

The factor follows the curve from 4k tokens up, interpolated in log2 of the length and held at the last point;
below 4k it keeps the 4k value, because the A100 reference the factors divide by (FlashAttention-2 at 16k) stands for
the fitted A100 efficiency, which was fitted on runs of 2k tokens and up where the A100's own kernel also rises
with the length (the B200 figures below 4k, 84-479 TFLOP/s forward, are not used).
"""

from __future__ import annotations

import math

# (tokens, forward TFLOP/s, backward TFLOP/s) as the CSV prints them, 4k tokens and up.
B200_CUDNN = ((4096, 855.678, 701.265), (8192, 1171.278, 942.509), (16384, 1332.415, 1074.776),
              (32768, 1419.000, 1108.688), (65536, 1382.330, 1073.059), (131072, 1355.418, 1047.843))  # fmt: skip
B200_FLASH_ATTENTION_2 = ((4096, 324.899, 256.427), (8192, 373.392, 298.867), (16384, 394.495, 319.979),
                          (32768, 403.739, 330.801), (65536, 408.739, 335.402), (131072, 410.988, 336.043))  # fmt: skip
# The same benchmark on a GB300 (sdpa_bf16_benchmark_results_NVIDIA_GB300.csv, same commit and setup): Blackwell
# Ultra, the B300's die, whose doubled exponent rate (SFU) is what attention's softmax gains over the B200's.
GB300_CUDNN = ((4096, 1144.867, 892.572), (8192, 1495.674, 1130.076), (16384, 1702.463, 1267.827),
               (32768, 1795.879, 1319.161), (65536, 1770.478, 1301.700), (131072, 1720.854, 1280.022))  # fmt: skip
GB300_FLASH_ATTENTION_2 = ((4096, 366.238, 291.593), (8192, 410.579, 330.096), (16384, 430.746, 350.925),
                           (32768, 440.329, 362.028), (65536, 444.845, 366.561), (131072, 447.786, 368.391))  # fmt: skip

H200_CUDNN = ((4096, 591.0, 474.0), (8192, 644.0, 541.0), (16384, 673.0, 579.0), (32768, 688.0, 581.0))

# AMD's assembly attention kernels (ROCm/aiter op_tests/cpp/mha/README.md, its table added in a83421be, 2025-10-31,
# read at e4048607): BF16, BSHD, batch 1, 64 query and 8 key-value heads, head dim 128, causal (FLOPs halved, as
# FlashAttention-2 counts them: from 8k tokens the causal rows run within 15% of the unmasked ones' rate, at 4k at
# 0.80-0.88 of it); the backward with fp32 atomics for dQ (BWD-a32), the default of aiter's Python API
# (`is_v3_atomic_fp32=True`, aiter/ops/mha.py). (tokens, forward, backward) as printed, every causal length of that
# shape.
MI300X_AITER = ((4096, 474.385, 378.155), (8192, 518.29, 433.285), (10240, 510.895, 447.995),
                (16384, 541.55, 412.04))  # fmt: skip
MI355X_AITER = ((4096, 1046.085, 694.125), (8192, 1300.105, 765.21), (10240, 1338.005, 788.92),
                (16384, 1392.485, 808.93))  # fmt: skip

# FlashAttention-2's release charts, forward + backward TFLOP/s (tokens, rate) as labelled, head dim 128; the A100's
# unmasked 512 and 1k labels are hidden behind the legend.
A100_FA2_NO_MASK = ((2048, 187.0), (4096, 196.0), (8192, 201.0), (16384, 203.0))
A100_FA2_CAUSAL = ((512, 99.0), (1024, 133.0), (2048, 155.0), (4096, 173.0), (8192, 182.0), (16384, 189.0))
H100_FA2_NO_MASK = ((512, 248.0), (1024, 294.0), (2048, 320.0), (4096, 326.0), (8192, 335.0), (16384, 338.0))
H100_FA2_CAUSAL = ((512, 163.0), (1024, 221.0), (2048, 265.0), (4096, 294.0), (8192, 308.0), (16384, 328.0))

Curve = tuple[tuple[int, float], ...]  # (tokens, TFLOP/s forward + backward), ascending


def forward_backward(measured: tuple[tuple[int, float, float], ...]) -> Curve:
    """Each length's forward + backward rate: 3.5 / (1 / forward + 2.5 / backward); the lengths ascending."""
    lengths = [tokens for tokens, _, _ in measured]
    if lengths != sorted(set(lengths)):
        raise ValueError(f"a curve's lengths must ascend: {lengths}")
    return tuple((tokens, 3.5 / (1 / forward + 2.5 / backward)) for tokens, forward, backward in measured)


def relative_rate(curve: Curve, tokens: int) -> float:
    """The curve's rate at `tokens` over its first point's: 1 at or below it, held past its last."""
    if tokens <= curve[0][0]:
        return 1.0
    for (low, low_rate), (high, high_rate) in zip(curve, curve[1:]):
        if tokens <= high:
            share = (math.log2(tokens) - math.log2(low)) / (math.log2(high) - math.log2(low))
            return (low_rate + share * (high_rate - low_rate)) / curve[0][1]
    return curve[-1][1] / curve[0][1]
