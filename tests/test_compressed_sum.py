"""Gradient sums that carry 1 byte (int8) or 1 bit (onebit) per element (backends/parts/compressed_sum.py):
the codec against its definition, the 2-rank sums against the exact ones and against the same sums without
error feedback, the bytes sent against a ring all-reduce's 4 per fp32 element, and the tiny GPT trained for
200 steps under each mode against the uncompressed run (one torchrun job: tests/compression_runs.py)."""

from __future__ import annotations

import json

import pytest
import torch

from backends.parts.compressed_sum import Compressor, pack_signs, unpack_signs

BLOCK = Compressor.BLOCK


def test_signs_pack_eight_to_a_byte_and_come_back():
    values = torch.randn(8 * 40, generator=torch.Generator().manual_seed(0))
    packed = pack_signs(values)
    assert packed.dtype == torch.uint8 and packed.numel() == 40
    assert torch.equal(unpack_signs(packed), torch.where(values >= 0, 1.0, -1.0))
    assert pack_signs(torch.tensor([1.0, -1, -1, -1, -1, -1, -1, 1])).item() == 0b10000001  # first bit highest


def test_int8_rounds_each_block_to_its_own_scale():
    # Two blocks 1000x apart in size: each keeps its own precision (one scale for both would zero the small).
    rows = torch.cat([torch.randn(BLOCK), 1e-3 * torch.randn(BLOCK)]).reshape(1, -1)
    payload, scales = Compressor("int8").compress(rows)
    assert payload.dtype == torch.int8 and payload.shape == (1, 2 * BLOCK) and scales.shape == (1, 2)
    assert torch.allclose(scales[0], rows.reshape(2, BLOCK).abs().amax(dim=1) / 127)
    back = Compressor("int8").decompress(payload, scales).reshape(2, BLOCK)
    assert ((back - rows.reshape(2, BLOCK)).abs() <= scales[0][:, None] / 2 + 1e-9).all()


def test_onebit_keeps_each_blocks_signs_and_mean_magnitude():
    rows = torch.randn(2, 3 * BLOCK, generator=torch.Generator().manual_seed(1))
    payload, scales = Compressor("onebit").compress(rows)
    assert payload.dtype == torch.uint8 and payload.shape == (2, 3 * BLOCK // 8) and scales.shape == (2, 3)
    back = Compressor("onebit").decompress(payload, scales)
    blocks = rows.reshape(2, 3, BLOCK)
    assert torch.equal(back.reshape(2, 3, BLOCK), torch.sign(blocks) * blocks.abs().mean(dim=2, keepdim=True))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tests.distributed import run_torchrun

    out = tmp_path_factory.mktemp("compressed") / "results.json"
    run_torchrun(["tests/compression_runs.py", "--out", str(out)], nproc=2, timeout=600)
    return json.loads(out.read_text())


@pytest.mark.slow
def test_the_sums_are_close_alike_on_every_rank_and_error_feedback_stops_the_drift(runs):
    int8, onebit = runs["sums"]["int8"], runs["sums"]["onebit"]
    # int8: each rank's block rounded to half its scale, max|block| / 254: a few parts in a thousand.
    assert int8["reduce_scatter_error"] < 0.01 and int8["all_reduce_error"] < 0.02
    assert int8["same_on_every_rank"] and onebit["same_on_every_rank"]
    # Fed back, what compression dropped returns in later sums: 50 of them drift no further than about one.
    for mode in (int8, onebit):
        assert mode["drift_after_50"] < 0.25 * mode["drift_after_50_without_feedback"], mode
    assert onebit["drift_after_50"] < 2 * onebit["all_reduce_error"] + 0.5


@pytest.mark.slow
def test_the_wire_carries_one_byte_or_one_bit_per_element_with_the_block_scales(runs):
    # A ring all-reduce's bytes per element: fp32 4; int8 1 + a 4-byte scale per block; onebit 1/8 + the same.
    scales = 4 / BLOCK
    assert runs["sums"]["int8"]["bytes_per_element"] == pytest.approx(1 + scales)
    assert runs["sums"]["onebit"]["bytes_per_element"] == pytest.approx(1 / 8 + scales)


def _final_loss(run: dict) -> float:
    return sum(run["losses"][-10:]) / 10


@pytest.mark.slow
def test_the_tiny_gpt_after_200_steps_int8_within_2_percent_of_uncompressed(runs):
    reference = runs["zero1_none"]
    assert _final_loss(reference) < 0.4 * reference["losses"][0]  # it learned: the test can tell a difference
    assert _final_loss(runs["zero1_int8"]) == pytest.approx(_final_loss(reference), rel=0.02)
    assert runs["zero1_int8"]["losses"] != reference["losses"]  # the compression really rounded something


@pytest.mark.slow
def test_onebit_is_1bit_adam_and_ends_no_more_than_2_percent_above_uncompressed(runs):
    """onebit is 1-bit Adam on ZeRO-0 (backends/parts/onebit_adam.py): 40 steps of AdamW, then the variance
    frozen and the momenta averaged in signs. Issue 35's goal, loss after 200 steps at most 2% above
    uncompressed, holds one-sided only: measured 0.736 against 1.637, 55% BELOW, not within 2% either way.
    The frozen variance itself does that (the same 1-bit Adam with the momenta averaged exactly differs from
    AdamW only there, and ends at 0.510; why it trains faster on this run is docs/parallelism.md's reading, not
    a test's). What the compression costs is against that run,
    measured +44% (0.736 / 0.510), held below 2x so it cannot grow (docs/parallelism.md says all of this)."""
    reference, onebit = runs["zero1_none"], runs["zero0_onebit"]
    exact = runs["zero0_onebit_exact_momentum"]
    # The warm-up is AdamW on exactly summed gradients: the loss after each of its 40 updates is the reference's.
    assert onebit["losses"][:41] == pytest.approx(reference["losses"][:41], rel=1e-5)
    assert exact["losses"][:41] == pytest.approx(reference["losses"][:41], rel=1e-5)
    assert onebit["losses"][41:] != reference["losses"][41:] and onebit["losses"][41:] != exact["losses"][41:]
    assert _final_loss(onebit) <= 1.02 * _final_loss(reference)  # the 2%, one-sided
    assert _final_loss(exact) < _final_loss(reference)  # the frozen variance, not the compression, moves it down
    assert _final_loss(onebit) < 2 * _final_loss(exact)  # the compression's cost, measured 1.44x
    # Each rank steps on its own gradient after the warm-up; the gradient norm is their root mean square, alike.
    assert onebit["norms_same_on_every_rank"]


@pytest.mark.slow
def test_1bit_adams_momentum_all_reduce_carries_one_bit_per_element_with_the_block_scales(runs):
    """After the warm-up no gradient is sent; the momentum's compressed all-reduce is the whole traffic, at the
    sums' 1/8 + 4/128 bytes per element (a ring all-reduce's count; 2 ranks: 1 element sent per element), plus
    the padding of each ZeRO unit's chunks to whole blocks (measured +0.4%)."""
    onebit = runs["zero0_onebit"]
    per_element = onebit["wire_bytes"] / onebit["compressed_steps"] / onebit["elements"]
    assert per_element == pytest.approx(1 / 8 + 4 / BLOCK, rel=0.01)
