"""How an attention kernel's rate grows with the length (planner/throughput/attention_curves.py), against the
figures NVIDIA's cudnn-frontend benchmark prints for a B200 (its CSV at 0b1577c8: forward and backward TFLOP/s and
times, causal, 128 query and 8 key-value heads, head dim 128)."""

from __future__ import annotations

import pytest

from planner.hardware.gpus import find_gpu
from planner.throughput.attention_curves import B200_CUDNN, forward_backward, relative_rate
from planner.throughput.library_efficiency import library_efficiency

# (tokens, forward ms, backward ms) of cuDNN's rows, as the CSV prints them.
CUDNN_TIMES = ((4096, 0.642, 1.960), (8192, 1.877, 5.833), (16384, 6.602, 20.460), (32768, 24.795, 79.338))


def test_the_curve_is_the_csvs_times_under_flash_attention_2s_count():
    """Forward + backward from the printed TFLOP/s equals the printed times under FlashAttention-2's FLOP count
    (4 x s^2 x heads x head dim a forward, halved for causal, 2.5x that a backward), to the times' rounding."""
    curve = dict(forward_backward(B200_CUDNN))
    for tokens, forward_ms, backward_ms in CUDNN_TIMES:
        forward = 4 * tokens**2 * 128 * 128 / 2
        assert 3.5 * forward / ((forward_ms + backward_ms) * 1e-3) / 1e12 == pytest.approx(curve[tokens], rel=2e-3)


def test_the_rate_follows_the_curve_from_4k_and_holds_outside_it():
    curve = forward_backward(B200_CUDNN)
    by_length = dict(curve)
    assert relative_rate(curve, 2048) == 1.0 and relative_rate(curve, 4096) == 1.0  # held below 4k
    assert relative_rate(curve, 16384) == pytest.approx(by_length[16384] / by_length[4096])  # a measured point
    between = relative_rate(curve, 11585)  # ~2^13.5: halfway in log2 between 8k and 16k
    assert between == pytest.approx((by_length[8192] + by_length[16384]) / 2 / by_length[4096], rel=1e-3)
    assert relative_rate(curve, 1 << 20) == pytest.approx(by_length[131072] / by_length[4096])  # held past 128k


def test_blackwells_factor_at_a_length_and_hoppers_at_every_length():
    b200, h100 = library_efficiency(find_gpu("B200")), library_efficiency(find_gpu("H100-80GB"))
    assert b200.attention_at(4096) == b200.attention
    assert b200.attention_at(16384) / b200.attention == pytest.approx(1137.6 / 739.39, rel=1e-3)
    assert h100.attention_at(4096) == h100.attention_at(65536) == h100.attention  # one factor (no curve read)
