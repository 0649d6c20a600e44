"""Each GPU generation's library-efficiency factor against the figures its source prints (docs/accuracy.md, "GPU
library efficiency"), and the factor reaching the estimate and its sources."""

from __future__ import annotations

import pytest

from planner.hardware.cluster import make_cluster
from planner.hardware.gpus import find_gpu, load_gpu_catalog
from planner.models.resolve import resolve_model
from planner.throughput.constants import CONSTANTS
from planner.throughput.derived import build_hardware
from planner.throughput.estimate import estimate_throughput
from planner.throughput.library_efficiency import AMPERE, HOST_CPU, UNKNOWN, library_efficiency
from planner.training_config import TrainingConfig

A100_MATMUL = 271.2 / 312  # the MAMF table's A100 SXM row
A100_FLASH2 = 203 / 312  # FlashAttention-2's A100 figure, head dim 128, 16k
# cuDNN on a B200 at 4k tokens, causal (NVIDIA/cudnn-frontend's B200 CSV at 0b1577c8): forward + backward from the
# printed forward and backward TFLOP/s, whose FLOPs stand 1 : 2.5.
B200_CUDNN_4K = 3.5 / (1 / 855.678 + 2.5 / 701.265)

# (GPU, matmul factor, attention factor) as each source's printed figures give them.
PRINTED = [
    ("A100-80GB", 1.0, 1.0),
    ("H100-80GB", (794.5 / 989) / A100_MATMUL, (338 / 989) / A100_FLASH2),
    ("H200", (794.5 / 989) / A100_MATMUL, (338 / 989) / A100_FLASH2),  # "H200 is the same"
    ("B200", (1745.0 / 2250) / A100_MATMUL, (B200_CUDNN_4K / 2250) / A100_FLASH2),
    ("V100-32GB", (83 / 125) / A100_MATMUL, 98 / 203),  # Markidis et al. 2018; xformers against FA2 on the A100
    # B300: Blackwell Ultra, the GB300's cuDNN share over its 2500 peak (the same CSV set's GB300 file, at 4k).
    ("B300", (1769.0 / 2250) / A100_MATMUL, (3.5 / (1 / 1144.867 + 2.5 / 892.572) / 2500) / A100_FLASH2),
    ("GB200", (1822.0 / 2500) / A100_MATMUL, (B200_CUDNN_4K / 2250) / A100_FLASH2),
    # CDNA3 and CDNA4: aiter's assembly kernels at 4k tokens, causal, 64/8 heads, fp32-atomic backward (its README);
    # the MAMF rows over AMD's own peaks (the table prints 1300 for 1307.4 and divides the MI355X by 2300).
    ("MI300X", (668.4 / 1307.4) / A100_MATMUL, (3.5 / (1 / 474.385 + 2.5 / 378.155) / 1307.4) / A100_FLASH2),
    ("MI325X", (784.9 / 1307.4) / A100_MATMUL, (3.5 / (1 / 474.385 + 2.5 / 378.155) / 1307.4) / A100_FLASH2),
    ("MI355X", (1565.0 / 2516.6) / A100_MATMUL, (3.5 / (1 / 1046.085 + 2.5 / 694.125) / 2516.6) / A100_FLASH2),
    # Each against the A100 row of its own table: zzc0721/torch-performance-test-data's FP16 torch.mm (T4 42.71 of
    # 65, A100 SXM4 80GB 258.74), the MAMF table at 37d41a7 (MI250X 147.0 of one GCD's 191.5, A100 SXM 267.9).
    ("T4", (42.71 / 65) / (258.74 / 312), 98 / 203),  # attention: Volta's, assumed
    ("MI250X", (147.0 / 191.5) / (267.9 / 312), 0.5),  # attention assumed (aiter's assembly kernels skip CDNA2)
]


def test_every_factor_gives_back_its_measured_matmul_rate_on_the_catalogs_peak():
    """A factor is a share of the GPU's peak: times the catalog's dense BF16 peak and the A100's share it must give
    the measured TFLOP/s, where the source divided by another peak (the MAMF table's MI355X over the MI350X's 2300:
    9.4% too fast until 2026-11-29)."""
    for gpu, measured in (("H100-80GB", 794.5), ("B200", 1745.0), ("GB200", 1822.0), ("MI300X", 668.4),
                          ("MI325X", 784.9), ("MI355X", 1565.0)):  # fmt: skip
        spec = find_gpu(gpu)
        achieved = library_efficiency(spec).matmul * A100_MATMUL * spec.dense_tflops.bf16
        assert achieved == pytest.approx(measured, rel=1e-3), gpu


@pytest.mark.parametrize(("gpu", "matmul", "attention"), PRINTED)
def test_each_factor_is_its_sources_arithmetic(gpu, matmul, attention):
    factors = library_efficiency(find_gpu(gpu))
    assert factors.matmul == pytest.approx(matmul, rel=1e-12)
    assert factors.attention == pytest.approx(attention, rel=1e-12)


def test_the_b200_attention_figure_counts_flops_as_the_a100_reference_does():
    """The CSV's printed times (ms) give its TFLOP/s back under FlashAttention-2's own count, the A100 figure's:
    4 x s^2 x heads x head dim a forward, halved for causal, 2.5x that a backward."""
    forward = 4 * 4096**2 * 128 * 128 / 2
    assert forward / 0.642e-3 / 1e12 == pytest.approx(855.678, rel=1e-3)
    assert 2.5 * forward / 1.960e-3 / 1e12 == pytest.approx(701.265, rel=1e-3)
    assert 3.5 * forward / ((0.642 + 1.960) * 1e-3) / 1e12 == pytest.approx(B200_CUDNN_4K, rel=1e-3)


def test_the_rounded_factors_docs_accuracy_prints():
    named = ("H100-80GB", "B200", "V100-32GB", "T4", "MI250X")
    rounded = {gpu: round(library_efficiency(find_gpu(gpu)).matmul, 2) for gpu in named}
    assert rounded == {"H100-80GB": 0.92, "B200": 0.89, "V100-32GB": 0.76, "T4": 0.79, "MI250X": 0.89}
    assert round(library_efficiency(find_gpu("MI300X")).matmul, 2) == 0.59
    # The two other MI300X measurements docs/accuracy.md gives beside the MAMF table's agree within 0.035:
    # SemiAnalysis's against its own H100 (scaled by the H100's factor) and AMD's hipblaslt-bench.
    mi300x = library_efficiency(find_gpu("MI300X")).matmul
    semianalysis = (620 / 1307) / (720 / 989.5) * library_efficiency(find_gpu("H100-80GB")).matmul
    assert abs(semianalysis - mi300x) < 0.015 and abs((708 / 1307.4) / A100_MATMUL - mi300x) < 0.035


def test_every_catalog_gpu_has_a_factor_that_names_its_source():
    """Every GPU of the catalog but the host CPU finds its generation (the MI355X's CDNA4 matched none and took the
    A100's until 2026-11-29); each factor either cites what it was read from or says it is assumed."""
    for gpu in load_gpu_catalog():
        name = gpu.name
        factors = library_efficiency(gpu)
        if gpu.memory_is_host:
            assert factors is HOST_CPU
            continue
        assert factors is not UNKNOWN, name
        assert "assumed" in factors.source or any(mark in factors.source for mark in ("http", "/", "doi:")), name
    assert library_efficiency(find_gpu("MI355X")).matmul < 1.0


def test_the_factor_scales_the_device_and_is_named_in_the_estimate():
    config = TrainingConfig(strategy="fsdp", micro_batch=1, grad_accum=1, seq_len=2048)
    for gpu in ("H100-80GB", "V100-32GB"):
        cluster = make_cluster(gpu, 8, 1)
        device = build_hardware(
            cluster,
            TrainingConfig(strategy="fsdp", micro_batch=1, grad_accum=1, seq_len=2048, precision="fp16-mixed"),
            CONSTANTS,
        )[0]
        factors = library_efficiency(cluster.gpu)
        assert device.matmul_flops == pytest.approx(device.peak_flops * factors.matmul)
        assert device.attention_flops == pytest.approx(device.peak_flops * factors.attention)
    spec = resolve_model("llama-3.2-1b")
    h100 = estimate_throughput(spec, config, make_cluster("H100-80GB", 8, 1))
    assert "MAMF" in h100.sources["gpu_library_efficiency"]
    # Our backends run cuDNN's attention on Hopper (torch 2.13's SDPA): FlashAttention-2's 0.53, times 1.5.
    assert h100.sources["gpu_library_efficiency"].startswith("H100-80GB: matmul x0.92, FP8 x0.82, attention x0.79")
    a100 = estimate_throughput(spec, config, make_cluster("A100-80GB", 8, 1))
    assert "gpu_library_efficiency" not in a100.sources and library_efficiency(find_gpu("A100-80GB")) is AMPERE
    # The printed speed line (plan, estimate) names the factor; the A100's names none.
    from planner.search.explain import throughput_source

    assert throughput_source(h100).endswith(
        "; H100-80GB: matmul x0.92, FP8 x0.82, attention x0.79 (a Hopper-native kernel, cuDNN's or FlashAttention-3: "
        "x1.50 FlashAttention-2's at 2048 tokens) the A100's (sources.gpu_library_efficiency)"
    )
    assert "gpu_library_efficiency" not in throughput_source(a100)


# (GPU, FP8 factor) from the MAMF table's FP8 rows; None: no FP8 row read, the BF16 factor stands in.
FP8_PRINTED = [
    ("H100-80GB", (1402.6 / 1979) / A100_MATMUL),
    ("H200", (1453.4 / 1979) / A100_MATMUL),
    ("B200", (3432.5 / 4500) / A100_MATMUL),
    ("B300", (3353.3 / 4500) / A100_MATMUL),
    ("GB200", (3615.6 / 5000) / A100_MATMUL),
    ("MI300X", None),  # the table's MI300X FP8 row is empty
]


@pytest.mark.parametrize(("gpu", "fp8"), FP8_PRINTED)
def test_fp8_matmuls_run_at_their_measured_share(gpu, fp8):
    """FP8 matmuls at the FP8 peak x the measured FP8 share (H100: 70.9% of 1979 against 80.3% of 989 in BF16);
    until 2026-11-29 they took the BF16 factor (docs/accuracy.md, "GPU library efficiency")."""
    factors = library_efficiency(find_gpu(gpu))
    assert factors.fp8 == pytest.approx(factors.matmul if fp8 is None else fp8, rel=1e-12)
    cluster = make_cluster(gpu, 8, 1)
    config = TrainingConfig(strategy="fsdp", micro_batch=1, grad_accum=1, seq_len=2048)
    device = build_hardware(cluster, config, CONSTANTS)[0]
    if cluster.gpu.dense_tflops.fp8:
        assert device.fp8_matmul_flops == pytest.approx(cluster.gpu.dense_tflops.fp8 * 1e12 * factors.fp8)
    if fp8 is not None:
        assert factors.fp8 < factors.matmul  # FP8 reaches a smaller share of its peak than BF16 on these parts


def test_the_cpu_device_names_no_gpu_library():
    """The cpu pseudo-device runs the fitted efficiencies at its own peak: no factor line (it printed "cpu: matmul
    x1.00 ... the A100's; assumed" before)."""
    config = TrainingConfig(strategy="ddp", micro_batch=1, grad_accum=1, seq_len=128, precision="fp32")
    cpu = estimate_throughput(resolve_model("gpt2"), config, make_cluster("cpu", 2, 1))
    assert "gpu_library_efficiency" not in cpu.sources
    assert library_efficiency(find_gpu("cpu")) is HOST_CPU


def test_the_hopper_native_speedup_is_cudnns_measured_share_at_4k():
    """cuDNN 9.19 on an H200 at 4k tokens, causal (cudnn-frontend's h200_919_only_cudnn CSV at df73764a): forward 591,
    backward 474 TFLOP/s, against FlashAttention-2's Hopper factor: 1.49x, the 1.5 our backends (torch 2.13's SDPA
    runs cuDNN on sm90) and Megatron-Core are planned with."""
    from planner.throughput.implementation import HOPPER_NATIVE_ATTENTION_SPEEDUP

    cudnn_h200_4k = 3.5 / (1 / 591 + 2.5 / 474)
    measured = (cudnn_h200_4k / 989) / A100_FLASH2 / library_efficiency(find_gpu("H200")).attention
    assert measured == pytest.approx(HOPPER_NATIVE_ATTENTION_SPEEDUP, rel=0.01)


def test_our_backends_run_cudnns_attention_on_hopper_and_rows_that_ran_flash_attention_2_keep_it():
    """Ours on an H100: attention at 1.5x FlashAttention-2's rate, named in the source; not under our context
    parallelism (its lower-right causal bias calls FlashAttention-2 directly), nor with eager attention, nor on an
    A100; the published Hopper rows that ran FlashAttention-2 (`attention_kernel`) are estimated with it."""
    import dataclasses

    from benchmarks.accuracy.validate_published_runs import implementation_of, published_rows
    from planner.throughput.implementation import OUR_STRATEGIES

    flash2 = dataclasses.replace(OUR_STRATEGIES, hopper_native_attention=False)
    spec = resolve_model("llama-3.1-8b")
    config = TrainingConfig(
        strategy="fsdp", micro_batch=1, grad_accum=1, seq_len=16384, activation_checkpointing="full"
    )
    h100, a100 = make_cluster("H100-80GB", 8, 1), make_cluster("A100-80GB", 8, 1)
    native = estimate_throughput(spec, config, h100)
    assert native.tokens_per_s > estimate_throughput(spec, config, h100, implementation=flash2).tokens_per_s
    assert "Hopper-native" in native.sources["gpu_library_efficiency"]
    # x1.5 at 4k, grown as cuDNN's H200 rate from 4k to 16k (502.4 -> 603.1 TFLOP/s: attention_curves.py).
    growth = (3.5 / (1 / 673 + 2.5 / 579)) / (3.5 / (1 / 591 + 2.5 / 474))
    assert f"attention x{(338 / 989) / A100_FLASH2 * 1.5 * growth:.2f}" in native.sources["gpu_library_efficiency"]
    assert f"x{1.5 * growth:.2f} FlashAttention-2's at 16384 tokens" in native.sources["gpu_library_efficiency"]
    assert (
        estimate_throughput(spec, config, a100).tokens_per_s
        == estimate_throughput(spec, config, a100, implementation=flash2).tokens_per_s
    )
    for other in (
        TrainingConfig(
            strategy="engine",
            zero_stage=1,
            layout={"cp": 2},
            micro_batch=1,
            grad_accum=1,
            seq_len=16384,
            activation_checkpointing="full",
        ),  # fmt: skip
        config.model_copy(update={"attention": "eager", "seq_len": 2048}),
    ):
        same = estimate_throughput(spec, other, h100)
        assert same.tokens_per_s == estimate_throughput(spec, other, h100, implementation=flash2).tokens_per_s
        assert "Hopper-native" not in same.sources["gpu_library_efficiency"]
    # On a B200 the factor is cuDNN's; our context parallelism's chunks run FlashAttention-2 (the same CSV, 4k).
    b200_cp = estimate_throughput(spec, config.model_copy(update={"seq_len": 16384}), make_cluster("B200", 8, 1))
    # cuDNN's rate grows with the length (attention_curves.py): at 16k, 1137.6 against 4k's 739.4 TFLOP/s.
    assert (
        "attention x0.78 (the measured kernel at 16384 tokens) the A100's" in b200_cp.sources["gpu_library_efficiency"]
    )
    cp_config = TrainingConfig(strategy="engine", zero_stage=1, layout={"cp": 2}, micro_batch=1, grad_accum=1,
                               seq_len=16384, activation_checkpointing="full")  # fmt: skip
    b200 = library_efficiency(find_gpu("B200"))
    assert b200.flash_attention_2 == pytest.approx((3.5 / (1 / 324.899 + 2.5 / 256.427) / 2250) / A100_FLASH2)
    fa2_8k = (3.5 / (1 / 373.392 + 2.5 / 298.867) / 2250) / A100_FLASH2  # the same CSV at a rank's 16k / 2
    assert b200.flash_attention_2_at(8192) == pytest.approx(fa2_8k)
    cp_source = estimate_throughput(spec, cp_config, make_cluster("B200", 8, 1)).sources["gpu_library_efficiency"]
    assert f"attention x{fa2_8k:.2f} (FlashAttention-2, which our context parallelism" in cp_source
    # Every published Hopper row of ours and torchtitan (which runs cuDNN's first since 2025-10) ran FlashAttention-2,
    # but cudnn-frontend's benchmark, which pinned each backend in turn (half its rows cuDNN's).
    hopper = [
        row
        for row in published_rows()
        if row["implementation"] in ("ours", "torchtitan") and find_gpu(row["gpu"]).architecture.startswith("Hopper")
    ]
    pinned_in_turn = [row for row in hopper if row.get("stack") == "cudnn-frontend-llama-1b"]
    assert len(pinned_in_turn) == 12 and sum("attention_kernel" in row for row in pinned_in_turn) == 6
    hopper = [row for row in hopper if row not in pinned_in_turn]
    assert len(hopper) == 30
    assert all(row.get("attention_kernel") == "flash-attention-2" for row in hopper)
    assert all(implementation_of(row).runs_flash_attention_2 for row in hopper)


def test_a_flash_attention_2_pin_runs_its_own_curve_on_blackwell_and_the_factor_on_hopper():
    """Blackwell's factor is cuDNN's, where FlashAttention-2 runs at about a third of it: a row pinned to it
    (`attention_kernel: flash-attention-2`) runs FlashAttention-2's measured curve there, named in the source; on
    Hopper, FlashAttention-2's factor itself, without the Hopper-native speedup. Any other kernel name is refused."""
    from benchmarks.accuracy.validate_published_runs import implementation_of

    row = {"id": "synthetic", "implementation": "ours", "gpu": "B200", "attention_kernel": "flash-attention-2"}
    pinned = implementation_of(row)
    config = TrainingConfig(strategy="ddp", micro_batch=1, grad_accum=1, seq_len=8192)
    b200 = library_efficiency(find_gpu("B200"))
    rate, why = pinned.attention_kernel(find_gpu("B200"), config)
    assert rate == pytest.approx(b200.flash_attention_2_at(8192) / b200.attention)
    assert rate < 0.5 and why == "FlashAttention-2, which this stack runs, at 8192 tokens"
    assert pinned.attention_kernel(find_gpu("H100-80GB"), config) == (1.0, "")
    with pytest.raises(ValueError, match="only flash-attention-2"):
        implementation_of({**row, "attention_kernel": "cudnn"})
