"""Compressed data-parallel gradients: dp2 training of tiny Llama for 6 SGD steps against fp32 single-process.

The runs go through backends.initialize with engine.json's
`hardware_selector.compression` key, so the compression is the one the
engine's ZeRO-2 reduce-scatters (overlapped with backward) really apply.
Stated tolerances (docs/parallelism.md): bf16 communication keeps every step's
loss within 1e-4 of the reference, int8 with error feedback within 5e-4. The
uncompressed path must match to 1e-5, and the compressed ones must differ from
it (otherwise the switch did nothing).
"""

from __future__ import annotations

import pytest

from planner.errors import UserInputError
from tests.parallel_checks import run_checks

LOSS_TOLERANCE = {"none": 1e-5, "bf16": 1e-4, "int8": 5e-4}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    names = [f"compression_{mode}" for mode in LOSS_TOLERANCE]
    return run_checks(names, 2, tmp_path_factory.mktemp("compression"))


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(LOSS_TOLERANCE))
def test_compressed_gradients_keep_the_loss_within_tolerance(results, mode):
    result = results[f"compression_{mode}"]
    assert len(result["losses"]) == 6
    assert result["loss_diff"] < LOSS_TOLERANCE[mode], result
    if mode == "none":
        assert result["param_diff"] < 1e-5, result
    else:
        assert result["param_diff"] > 1e-7, result  # the compression really rounded something


def test_unknown_mode_is_a_user_error():
    from backends.parts.compression import GradientReducer

    with pytest.raises(UserInputError, match="use one of none, fp32, bf16, fp16, int8, onebit"):
        GradientReducer(None, "1bit")


def _two_rank_sum(mode: str, gradients: list) -> tuple:
    """What the codec's encode -> SUM -> decode gives for two ranks' buckets (the collectives done by hand; int8
    and onebit take a sum of their own: tests/test_compressed_sum.py)."""
    from backends.parts.compression import BucketCodec

    codecs = [BucketCodec(mode, 2) for _ in gradients]
    wires = [codec.encode("bucket", g) for codec, g in zip(codecs, gradients)]
    return codecs[0].decode("bucket", wires[0] + wires[1]), codecs, wires


def test_codec_sums_match_the_fp32_sum_within_the_wire_precision():
    import torch

    gradients = [torch.randn(1000, generator=torch.Generator().manual_seed(seed)) for seed in (1, 2)]
    exact = gradients[0] + gradients[1]
    magnitude = gradients[0].abs() + gradients[1].abs()
    for mode, unit_roundoff in (("none", 0.0), ("fp32", 0.0), ("bf16", 2**-8), ("fp16", 2**-11)):
        summed, _, _ = _two_rank_sum(mode, gradients)
        assert summed.dtype == torch.float32
        # each halved value rounded once, then their sum once more
        assert ((summed - exact).abs() <= 2 * unit_roundoff * magnitude + 1e-7).all(), mode
    half = [g.to(torch.bfloat16) for g in gradients]  # DeepSpeed's communication_data_type fp32 in bf16 training
    summed, _, wires = _two_rank_sum("fp32", half)
    assert wires[0].dtype == torch.float32 and torch.equal(summed, half[0].float() + half[1].float())
