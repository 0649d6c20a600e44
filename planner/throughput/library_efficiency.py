"""How much of each GPU generation's dense peak its libraries reach, relative to the A100 the constants were fitted on.

The compute model's efficiencies (constants.py: `matmul_peak_fraction`, `attention_peak_fraction`) are fitted on
A100 runs. Another GPU's matmul and attention run at those efficiencies times its generation's factor here:

    factor = (share of its dense peak the GPU's library reaches) / (share the A100's reaches, same kind of measurement)

Each factor names the published measurement it comes from (docs/accuracy.md, "GPU library efficiency"); where no
measurement was read, `assumed` says what stands in for it. No factor is fitted on the published runs the
accuracy tables compare with.

The A100 reference: Stas Bekman's "Maximum Achievable Matmul FLOPS" table (github.com/stas00/ml-engineering,
compute/accelerator/README.md, read at 744d01e; BF16 `torch.matmul`, the best shape of a search, mean of 100
iterations after 50 warm-up) measures the A100 SXM at 271.2 of 312 TFLOP/s, 86.9% (the fitted
`matmul_peak_fraction` is 85.2%), and FlashAttention-2's release figure (Dao-AILab/flash-attention
assets/flash2_a100_fwd_bwd_benchmark.png at 4f285b3, 2023-07-17; forward + backward, head dim 128, no causal
mask, sequence 16k) at 203 TFLOP/s, 65% of 312.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from planner.hardware.gpus import GpuSpec
from planner.throughput.attention_curves import (
    A100_FA2_NO_MASK,
    B200_CUDNN,
    B200_FLASH_ATTENTION_2,
    GB300_CUDNN,
    GB300_FLASH_ATTENTION_2,
    H100_FA2_NO_MASK,
    H200_CUDNN,
    MI300X_AITER,
    MI355X_AITER,
    Curve,
    forward_backward,
    relative_rate,
)

_A100_MATMUL = 271.2 / 312  # MAMF table, A100 SXM BF16
_A100_FLASH2 = A100_FA2_NO_MASK[-1][1] / 312  # FlashAttention-2 forward + backward, head dim 128, 16k: 203


@dataclass(frozen=True)
class LibraryEfficiency:
    matmul: float  # multiplies the fitted matmul efficiency
    attention: float  # multiplies the fitted attention efficiency
    source: str  # where both come from, or what is assumed
    fp8_matmul: float | None = None  # FP8 matmuls' share against the A100's BF16 one; None: the BF16 factor's
    fa2_attention: float | None = None  # FlashAttention-2's factor where `attention` is another kernel's (Blackwell)
    # How each kernel's rate grows with the length from the one its factor is read at (attention_curves.py);
    # empty: one factor at every length.
    attention_curve: Curve = ()
    fa2_curve: Curve = ()
    native_curve: Curve = ()  # a Hopper-native kernel's (cuDNN's) growth, for stacks that run one on Hopper

    @property
    def flash_attention_2(self) -> float:
        """The factor FlashAttention-2 runs at: `attention` where that is FlashAttention-2's (Ampere, Hopper)."""
        return self.attention if self.fa2_attention is None else self.fa2_attention

    def attention_at(self, tokens: int) -> float:
        """The attention factor at this sequence length."""
        return self.attention * (relative_rate(self.attention_curve, tokens) if self.attention_curve else 1.0)

    def native_growth_at(self, tokens: int) -> float:
        """How much faster a Hopper-native kernel runs at this length than at the one its speedup is read at."""
        return relative_rate(self.native_curve, tokens) if self.native_curve else 1.0

    def flash_attention_2_at(self, tokens: int) -> float:
        """FlashAttention-2's factor at this sequence length."""
        return self.flash_attention_2 * (relative_rate(self.fa2_curve, tokens) if self.fa2_curve else 1.0)

    @property
    def fp8(self) -> float:
        """The factor FP8 matmuls run at (times the FP8 peak): measured where the source has an FP8 row."""
        return self.matmul if self.fp8_matmul is None else self.fp8_matmul


_MAMF = "the MAMF table (stas00/ml-engineering at 744d01e)"
# FlashAttention-2 on the H100 (338 at 16k) against the A100, same figure set: the ratio at every length
# (attention_curves.py).
_HOPPER_ATTENTION = (H100_FA2_NO_MASK[-1][1] / 989) / _A100_FLASH2
# cuDNN attention on a B200 (the kernel Transformer Engine and torch 2.13's SDPA run on sm100) and FlashAttention-2
# through SDPA, forward + backward, each at 4k tokens and then by length (attention_curves.py).
_B200_CUDNN_CURVE = forward_backward(B200_CUDNN)
_B200_FLASH2_CURVE = forward_backward(B200_FLASH_ATTENTION_2)
_BLACKWELL_ATTENTION = (_B200_CUDNN_CURVE[0][1] / 2250) / _A100_FLASH2
_BLACKWELL_FLASH2 = (_B200_FLASH2_CURVE[0][1] / 2250) / _A100_FLASH2
_HOPPER_NATIVE_CURVE = forward_backward(H200_CUDNN)
_BLACKWELL_KERNELS = {
    "fa2_attention": _BLACKWELL_FLASH2,
    "attention_curve": _B200_CUDNN_CURVE,
    "fa2_curve": _B200_FLASH2_CURVE,
}
_BLACKWELL_ATTENTION_SOURCE = (
    "cuDNN 9.13.1 attention through PyTorch 2.9's SDPA on a B200, forward + backward at 4k tokens (causal, 128 query "
    "and 8 key-value heads, head dim 128, BF16), 739.4 of 2250 TFLOP/s (NVIDIA/cudnn-frontend benchmark/"
    "sdpa_benchmark_training/artifacts/sdpa_bf16_benchmark_results_NVIDIA_B200.csv at 0b1577c8, 2025-10-10; the "
    "kernel Transformer Engine and torch 2.13's SDPA run on sm100), and by length from there: 998 at 8k, 1138 at 16k, "
    "1183 at 32k, 1120 at 128k (planner/throughput/attention_curves.py); FlashAttention-2 there 272.9 at 4k to 354 at 128k (its "
    "factor, where a stack runs it)"
)


def _mamf(
    row: str,
    measured: float,
    peak: float,
    attention: float,
    attention_source: str,
    fp8: tuple[float, float] | None = None,
    **kernels: Any,
) -> LibraryEfficiency:
    """A factor from one BF16 row of the MAMF table against its A100 row, and from its FP8 row where it has one
    (`fp8`: measured, peak); `attention_source` says where the attention factor comes from."""
    fp8_line = f"FP8 {fp8[0]} of {fp8[1]:g}" if fp8 else "FP8 not measured there, the BF16 factor assumed"
    return LibraryEfficiency(
        (measured / peak) / _A100_MATMUL,
        attention,
        f"matmul: {_MAMF}, {row} BF16 {measured} of {peak:g} TFLOP/s ({fp8_line}) against the A100's BF16 271.2 of "
        f"312; attention: {attention_source}",
        None if fp8 is None else (fp8[0] / fp8[1]) / _A100_MATMUL,
        **kernels,  # the attention kernels' other fields, by name (fa2_attention, attention_curve, fa2_curve, ...)
    )


AMPERE = LibraryEfficiency(
    1.0, 1.0, "the reference: the constants are fitted on A100 runs (benchmarks/accuracy/calibrate_throughput.py)"
)

_VOLTA = LibraryEfficiency(
    (83 / 125) / _A100_MATMUL,
    98 / 203,
    'matmul: "NVIDIA Tensor Cores can deliver up to 83 Tflops/s in mixed precision on a Tesla V100 GPU" of '
    "its 125 (Markidis et al., IPDPSW 2018, doi:10.1109/IPDPSW.2018.00091, abstract) against the A100's 271.2 of 312; "
    "attention: Volta has no FlashAttention-2 and runs the memory-efficient kernel (xformers' CUTLASS "
    "kernel, which PyTorch's SDPA takes over), measured at 98 TFLOP/s against FlashAttention-2's 203 on an "
    "A100 (Dao-AILab/flash-attention assets/flash2_a100_fwd_bwd_benchmark.png at 4f285b3); assumed the same "
    "share on a V100",
)

# CDNA: AMD's assembly attention kernels (aiter) at 4k tokens and by length from there (attention_curves.py), over
# the GPU's own peak. Which kernel a stack runs on ROCm is not resolved per stack (docs/accuracy.md, "GPU library
# efficiency": torch's SDPA measured far below these on an MI355X).
_MI300X_PEAK, _MI355X_PEAK = 1307.4, 2516.6  # AMD's dense BF16 (the catalog's; the MAMF table prints 1300 and 2300)
_MI300X_AITER_CURVE = forward_backward(MI300X_AITER)
_MI355X_AITER_CURVE = forward_backward(MI355X_AITER)


def _aiter_source(gpu: str, curve: Curve, peak: float) -> str:
    by_length = ", ".join(f"{rate:.0f} at {tokens // 1024}k" for tokens, rate in curve[1:])
    return (
        f"AMD's assembly attention kernels (ROCm/aiter op_tests/cpp/mha/README.md, a83421be, 2025-10-31) on an {gpu}, "
        f"forward + backward at 4k tokens (causal, batch 1, 64 query and 8 key-value heads, head dim 128, BF16, the "
        f"backward's default fp32 atomics), {curve[0][1]:.1f} of {peak:g} TFLOP/s, and by length from there: "
        f"{by_length} "
        "(planner/throughput/attention_curves.py); a stack on torch's SDPA (AOTriton) may run far below it (not "
        "priced: docs/accuracy.md)"
    )


_CDNA3_ATTENTION = (_MI300X_AITER_CURVE[0][1] / _MI300X_PEAK) / _A100_FLASH2
_CDNA3_ATTENTION_SOURCE = _aiter_source("MI300X", _MI300X_AITER_CURVE, _MI300X_PEAK)
_CDNA4_ATTENTION = (_MI355X_AITER_CURVE[0][1] / _MI355X_PEAK) / _A100_FLASH2

# Keyed by the start of GpuSpec.architecture ("Blackwell" also covers "Blackwell Ultra").
BY_ARCHITECTURE: dict[str, LibraryEfficiency] = {
    "Ampere": AMPERE,
    "Hopper": _mamf(
        "H100 SXM",
        794.5,
        989,
        _HOPPER_ATTENTION,
        "FlashAttention-2 forward + backward (head dim 128, 16k, no causal mask) at 338 TFLOP/s on an H100 80GB "
        "SXM5 against 203 on an A100 (Dao-AILab/flash-attention assets/flash2_{h100,a100}_fwd_bwd_benchmark.png at "
        '4f285b3; the FlashAttention-3 paper, arXiv:2407.08608: "FlashAttention-2 achieving only 35% utilization '
        'on the H100 GPU"; the same ratio, 1.65-1.74x, at every length from 512 to 16k tokens, causal or not, in '
        "those charts); cuDNN's growth with the length, for the stacks that run it, measured on an H200 "
        "(planner/throughput/attention_curves.py)",
        fp8=(1402.6, 1979),
        native_curve=_HOPPER_NATIVE_CURVE,
    ),
    "Blackwell": _mamf(
        "B200 SXM",
        1745.0,
        2250,
        _BLACKWELL_ATTENTION,
        _BLACKWELL_ATTENTION_SOURCE,
        (3432.5, 4500),
        **_BLACKWELL_KERNELS,
    ),
    "Ada Lovelace": LibraryEfficiency(
        1.0,
        1.0,
        "matmul: cuBLAS FP16 HGEMM at 105-115 of an L20's 119.5 TFLOP/s, 88-96% (DefTruth/CUDA-Learn-Notes "
        "hgemm/README.md; shapes not printed), at least the A100's share, so the reference's; attention assumed: "
        "the reference's (no Ada attention measurement read)",
    ),
    "Volta": _VOLTA,
    "Turing": replace(
        _VOLTA,
        matmul=(42.71 / 65) / (258.74 / 312),
        source="matmul: a T4's FP16 torch.mm at 42.71 of its 65 TFLOP/s against an A100 SXM4 80GB's 258.74 of 312 in "
        "the same table (zzc0721/torch-performance-test-data database.md at 9d828276: best of square sizes 1024-10240, "
        "30 timed calls after 10 warm-up; the T4 on Kaggle, PyTorch 2.6.0, CUDA 12.4; its two other rows 41.91 and "
        "41.93); attention: Volta's (no FlashAttention-2 on Turing either), assumed",
    ),
    "CDNA2": LibraryEfficiency(
        (147.0 / 191.5) / (267.9 / 312),
        0.5,
        "matmul: the MAMF table as it stood at stas00/ml-engineering 37d41a7 (2024-10-17, the row later removed), MI250X "
        "BF16 147.0 of one GCD's 191.5 TFLOP/s (ROCm 6.2) against that table's A100 SXM at 267.9 of 312; attention "
        "assumed (no MI250X attention measurement read)",
    ),
    "CDNA3": _mamf(
        "MI300X (ROCm 6.3, TunableOp on; the table's peak 1300 is AMD's 1307.4 rounded; SemiAnalysis, 2024-12-22: ~620 "
        "of 1,307 where the H100 reaches ~720 of 989.5, and AMD's hipblaslt-bench, rocm.blogs.amd.com 2025-02-28: "
        "708 of 1307.4, give 0.60 and 0.62)",
        668.4,
        _MI300X_PEAK,
        _CDNA3_ATTENTION,
        _CDNA3_ATTENTION_SOURCE,
        attention_curve=_MI300X_AITER_CURVE,
    ),
}

_B200_SHARES = "assumed, the B200's cuDNN and FlashAttention-2 shares"

# Blackwell Ultra (the B300): the GB300's measured shares over its 2500 TFLOP/s peak. The B300 and GB300 share the
# die and its exponent rate, 10.7 T/s against the B200's and GB200's 5 (Verda, "NVIDIA GB300 NVL72: GPU Architecture
# & Performance", verda.com/blog/gb300-nvl72-architecture, per-GPU table, read 2026-11-29: BF16 2.5 PFLOPS on the
# GB300, 2.25 on the B300), so the B300 runs the GB300's share of its own peak, not the B200's.
_GB300_CUDNN_CURVE = forward_backward(GB300_CUDNN)
_GB300_FLASH2_CURVE = forward_backward(GB300_FLASH_ATTENTION_2)
_BLACKWELL_ULTRA_KERNELS = {
    "fa2_attention": (_GB300_FLASH2_CURVE[0][1] / 2500) / _A100_FLASH2,
    "attention_curve": _GB300_CUDNN_CURVE,
    "fa2_curve": _GB300_FLASH2_CURVE,
}
_BLACKWELL_ULTRA_SOURCE = (
    "the GB300's, the same Blackwell Ultra die (its doubled exponent rate: Verda's per-GPU table, "
    "verda.com/blog/gb300-nvl72-architecture): cuDNN 9.13.1 through PyTorch 2.9's SDPA on a GB300, forward + backward "
    f"at 4k tokens, {_GB300_CUDNN_CURVE[0][1]:.1f} of 2500 TFLOP/s (NVIDIA/cudnn-frontend sdpa_benchmark_training "
    "artifacts/sdpa_bf16_benchmark_results_NVIDIA_GB300.csv at 0b1577c8, the B200's setup), and by length; "
    f"FlashAttention-2 there {_GB300_FLASH2_CURVE[0][1]:.1f} at 4k"
)


# GPUs whose measured share departs from their architecture's (another power limit, die or package).
BY_GPU: dict[str, LibraryEfficiency] = {
    "H200": _mamf(
        'H200 SXM (BF16: "H200 is the same" as the H100)',
        794.5,
        989,
        _HOPPER_ATTENTION,
        "Hopper's",
        fp8=(1453.4, 1979),
        native_curve=_HOPPER_NATIVE_CURVE,
    ),
    "B300": _mamf(
        "B300 SXM",
        1769.0,
        2250,
        (_GB300_CUDNN_CURVE[0][1] / 2500) / _A100_FLASH2,
        _BLACKWELL_ULTRA_SOURCE,
        (3353.3, 4500),
        **_BLACKWELL_ULTRA_KERNELS,
    ),
    "GB200": _mamf("GB200", 1822.0, 2500, _BLACKWELL_ATTENTION, _B200_SHARES, (3615.6, 5000), **_BLACKWELL_KERNELS),
    "MI325X": _mamf(
        "MI325X at 1000 W (the table's 1300 is AMD's 1307.4 rounded)",
        784.9,
        _MI300X_PEAK,
        _CDNA3_ATTENTION,
        "the MI300X's aiter share, assumed (the same compute die; AMD's hipblaslt-bench: matmul 843 of 1307)",
        attention_curve=_MI300X_AITER_CURVE,
    ),
    # The MAMF table divides the MI355X's 1565.0 by 2300, the MI350X's peak (68.0%); the MI355X's own is 2516.6.
    "MI355X": _mamf(
        "MI355X (ROCm 7.0; over its 2516.6 peak, where the table divides by 2300, the MI350X's)",
        1565.0,
        _MI355X_PEAK,
        _CDNA4_ATTENTION,
        _aiter_source("MI355X", _MI355X_AITER_CURVE, _MI355X_PEAK),
        attention_curve=_MI355X_AITER_CURVE,
    ),
}

UNKNOWN = LibraryEfficiency(1.0, 1.0, "assumed: the reference's (no factor for this architecture)")
# The cpu pseudo-device: its peak and bandwidth are the host's own figures, the fitted efficiencies unscaled.
HOST_CPU = LibraryEfficiency(1.0, 1.0, "the cpu device: no GPU library; the fitted efficiencies at its own peak")


def library_efficiency(gpu: GpuSpec) -> LibraryEfficiency:
    """The factors for `gpu`: its own where measured apart, else its architecture's."""
    if gpu.memory_is_host:
        return HOST_CPU
    if gpu.name in BY_GPU:
        return BY_GPU[gpu.name]
    for name, factors in BY_ARCHITECTURE.items():
        if gpu.architecture.startswith(name):
            return factors
    return UNKNOWN


def library_efficiency_source(gpu: GpuSpec, attention_speedup: float = 1.0, why: str = "") -> dict[str, str]:
    """The estimate's `gpu_library_efficiency` source for a GPU the constants were not fitted on (none for Ampere);
    `attention_speedup`: the stack's attention kernel and length against the ones the factor is read at, `why` what
    they are (Implementation.attention_kernel), which the attention factor printed includes."""
    factors = library_efficiency(gpu)
    if factors in (AMPERE, HOST_CPU):
        return {}
    fp8 = f", FP8 x{factors.fp8_matmul:.2f}" if factors.fp8_matmul is not None else ""
    attention = f"attention x{factors.attention * attention_speedup:.2f}" + (f" ({why})" if why else "")
    line = f"{gpu.name}: matmul x{factors.matmul:.2f}{fp8}, {attention} the A100's; {factors.source}"
    return {"gpu_library_efficiency": line}
