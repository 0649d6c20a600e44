"""How an attention kernel's rate grows with the length (planner/throughput/attention_curves.py), against the
figures its sources print: NVIDIA's cudnn-frontend benchmark for a B200 and a GB300 (its CSVs at 0b1577c8: forward
and backward TFLOP/s and times, causal, 128 query and 8 key-value heads, head dim 128) and an H200, FlashAttention-2's
release charts (H100 and A100), and AMD's aiter table (MI300X and MI355X)."""

from __future__ import annotations

import pytest

from planner.hardware.gpus import find_gpu
from planner.throughput.attention_curves import (
    A100_FA2_CAUSAL,
    A100_FA2_NO_MASK,
    B200_CUDNN,
    B200_FLASH_ATTENTION_2,
    GB300_CUDNN,
    GB300_FLASH_ATTENTION_2,
    H100_FA2_CAUSAL,
    H100_FA2_NO_MASK,
    H200_CUDNN,
    MI300X_AITER,
    MI355X_AITER,
    forward_backward,
    relative_rate,
)
from planner.throughput.library_efficiency import library_efficiency

# (tokens, forward ms, backward ms) of every row used, as each CSV prints them.
B200_CUDNN_TIMES = ((4096, 0.642, 1.960), (8192, 1.877, 5.833), (16384, 6.602, 20.460), (32768, 24.795, 79.338),
                    (65536, 101.812, 327.889), (131072, 415.333, 1343.117))  # fmt: skip
B200_FLASH2_TIMES = ((4096, 1.692, 5.360), (8192, 5.889, 18.395), (16384, 22.297, 68.724), (32768, 87.146, 265.902),
                     (65536, 344.321, 1049.021), (131072, 1369.748, 4188.079))  # fmt: skip
GB300_CUDNN_TIMES = ((4096, 0.480, 1.540), (8192, 1.470, 4.865), (16384, 5.167, 17.345), (32768, 19.592, 66.679),
                     (65536, 79.491, 270.296), (131072, 327.134, 1099.493))  # fmt: skip
GB300_FLASH2_TIMES = ((4096, 1.501, 4.713), (8192, 5.356, 16.654), (16384, 20.421, 62.664), (32768, 79.905, 242.968),
                      (65536, 316.374, 959.850), (131072, 1257.185, 3820.325))  # fmt: skip
H200_CUDNN_TIMES = ((4096, 0.465, 1.450), (8192, 1.708, 5.083), (16384, 6.531, 19.002), (32768, 25.566, 75.688))


@pytest.mark.parametrize(
    ("measured", "times", "heads", "exact_causal"),
    [
        (B200_CUDNN, B200_CUDNN_TIMES, 128, False),
        (B200_FLASH_ATTENTION_2, B200_FLASH2_TIMES, 128, False),
        (GB300_CUDNN, GB300_CUDNN_TIMES, 128, False),
        (GB300_FLASH_ATTENTION_2, GB300_FLASH2_TIMES, 128, False),
        (H200_CUDNN, H200_CUDNN_TIMES, 64, True),
    ],  # fmt: skip
)
def test_each_curve_is_its_csvs_times(measured, times, heads, exact_causal):
    """Forward + backward from the printed TFLOP/s equals the printed times under the CSV's FLOP count, to the times'
    rounding: 4 x s^2 x heads x head dim a forward, halved for causal (the B200 CSV, FlashAttention-2's count), or
    with the causal pairs counted exactly, s(s+1)/2 (the H200 one); a backward 2.5 forwards."""
    curve = dict(forward_backward(measured))
    assert sorted(curve) == [tokens for tokens, _, _ in times]
    for tokens, forward_ms, backward_ms in times:
        pairs = tokens * (tokens + 1) / 2 if exact_causal else tokens**2 / 2
        forward = 4 * pairs * heads * 128
        assert 3.5 * forward / ((forward_ms + backward_ms) * 1e-3) / 1e12 == pytest.approx(curve[tokens], rel=3e-3)


def test_the_rate_follows_the_curve_from_4k_and_holds_outside_it():
    curve = forward_backward(B200_CUDNN)
    by_length = dict(curve)
    assert relative_rate(curve, 2048) == 1.0 and relative_rate(curve, 4096) == 1.0  # held below 4k
    assert relative_rate(curve, 16384) == pytest.approx(by_length[16384] / by_length[4096])  # a measured point
    between = relative_rate(curve, 11585)  # ~2^13.5: halfway in log2 between 8k and 16k
    assert between == pytest.approx((by_length[8192] + by_length[16384]) / 2 / by_length[4096], rel=1e-3)
    assert relative_rate(curve, 1 << 20) == pytest.approx(by_length[131072] / by_length[4096])  # held past 128k


def test_blackwells_factor_at_a_length_and_hoppers_native_growth():
    b200, h100, h200 = (library_efficiency(find_gpu(name)) for name in ("B200", "H100-80GB", "H200"))
    assert b200.attention_at(4096) == b200.attention
    assert b200.attention_at(16384) / b200.attention == pytest.approx(1137.6 / 739.39, rel=1e-3)
    assert h100.attention_at(4096) == h100.attention_at(65536) == h100.attention  # FlashAttention-2: one factor
    assert h100.native_curve == h200.native_curve == forward_backward(H200_CUDNN)
    assert h200.native_growth_at(16384) == pytest.approx(603.1 / 502.4, rel=1e-3)


def test_the_lengths_a_config_is_read_at():
    """The estimate's source names the kernel and the length it took, a rank's share under context parallelism;
    nothing where the factor's own kernel and length apply (Blackwell at 4k and below)."""
    from planner.throughput.implementation import OUR_STRATEGIES, implementation_named
    from planner.training_config import TrainingConfig

    b200, megatron_core = find_gpu("B200"), implementation_named("megatron-core")
    at = dict(forward_backward(B200_CUDNN))
    assert OUR_STRATEGIES.attention_kernel(b200, TrainingConfig(seq_len=4096)) == (1.0, "")
    rate, why = OUR_STRATEGIES.attention_kernel(b200, TrainingConfig(seq_len=16384))
    assert rate == pytest.approx(at[16384] / at[4096]) and why == "the measured kernel at 16384 tokens"
    ring = TrainingConfig(strategy="engine", layout={"cp": 2}, seq_len=16384)  # a ring attention's rank: 8k
    assert megatron_core.attention_kernel(b200, ring)[0] == pytest.approx(at[8192] / at[4096])
    ours_rate, ours_why = OUR_STRATEGIES.attention_kernel(b200, ring)
    fa2 = dict(forward_backward(B200_FLASH_ATTENTION_2))
    assert ours_rate == pytest.approx(fa2[8192] / at[4096]) and "at 8192 tokens a rank" in ours_why


def test_hoppers_one_factor_is_the_h100_over_the_a100_at_every_charted_length():
    """FlashAttention-2's release charts (flash-attention assets at 4f285b3, the bars' labels): the H100's rate over
    the A100's at the same length and mask stays within 5% of the 16k unmasked ratio the Hopper factor is read at,
    from 512 to 16k tokens, causal or not, so one number is what the charts give against the A100; the H100's own
    rate is not flat (163 to 328 TFLOP/s causal), which the factor leaves to the fitted A100 efficiency."""
    hopper = library_efficiency(find_gpu("H100-80GB"))
    assert hopper.attention == pytest.approx((338 / 989) / (203 / 312))
    ratios = []
    for h100, a100 in ((H100_FA2_CAUSAL, A100_FA2_CAUSAL), (H100_FA2_NO_MASK, A100_FA2_NO_MASK)):
        a100_at = dict(a100)
        ratios += [rate / a100_at[tokens] for tokens, rate in h100 if tokens in a100_at]
    assert len(ratios) == 10
    factor_ratio = hopper.attention * 989 / 312  # the factor as an H100 / A100 rate ratio: 338 / 203
    assert max(abs(ratio / factor_ratio - 1) for ratio in ratios) < 0.05
    assert H100_FA2_CAUSAL[-1][1] / H100_FA2_CAUSAL[0][1] > 2  # the rate itself doubles over the same lengths


def test_aiters_causal_rows_count_flops_as_flash_attention_2_and_set_cdnas_factor_by_length():
    """aiter's README (op_tests/cpp/mha at a83421be) prints causal and unmasked rows of each shape: at 8k tokens
    (batch 1, 64/8 heads) the causal rows run within 15% of the unmasked ones, so their FLOPs are halved as the A100
    reference's are (unhalved they would read about twice the unmasked rate). The factor follows the causal rows
    from 4k, over each GPU's own peak; the MI325X takes the MI300X's (the same compute die)."""
    unmasked_8k = {"MI300X": (591.37, 441.82), "MI355X": (1412.91, 822.75)}  # forward, backward a32, as printed
    for gpu, measured in (("MI300X", MI300X_AITER), ("MI355X", MI355X_AITER)):
        causal_8k = next((forward, backward) for tokens, forward, backward in measured if tokens == 8192)
        for causal, unmasked in zip(causal_8k, unmasked_8k[gpu]):
            assert 0.85 < causal / unmasked < 1.15
        curve, spec = forward_backward(measured), find_gpu(gpu)
        factors = library_efficiency(spec)
        assert factors.attention == pytest.approx((curve[0][1] / spec.dense_tflops.bf16) / (203 / 312))
        assert factors.attention_at(2048) == factors.attention  # held below 4k
        assert factors.attention_at(16384) / factors.attention == pytest.approx(curve[-1][1] / curve[0][1])
        assert factors.attention_at(1 << 17) == factors.attention_at(16384)  # held past the last causal row
    assert library_efficiency(find_gpu("MI325X")).attention == library_efficiency(find_gpu("MI300X")).attention
    # No FlashAttention-2 is measured apart on CDNA: our context parallelism and a FlashAttention-2 pin keep the
    # factor's own kernel and curve, read at a rank's share.
    import dataclasses

    from planner.throughput.implementation import OUR_STRATEGIES
    from planner.training_config import TrainingConfig

    mi355x, pinned = find_gpu("MI355X"), dataclasses.replace(OUR_STRATEGIES, runs_flash_attention_2=True)
    cp = TrainingConfig(strategy="engine", layout={"cp": 2}, seq_len=32768, micro_batch=1, grad_accum=1)
    growth = dict(forward_backward(MI355X_AITER))
    rate, why = OUR_STRATEGIES.attention_kernel(mi355x, cp)
    assert rate == pytest.approx(growth[16384] / growth[4096]) and why == "the measured kernel at 16384 tokens"
    whole = TrainingConfig(strategy="ddp", seq_len=16384, micro_batch=1, grad_accum=1)
    assert pinned.attention_kernel(mi355x, whole)[0] == rate
