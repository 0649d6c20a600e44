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
    from backends.compression import GradientReducer

    with pytest.raises(UserInputError, match="use one of none, bf16, fp16, int8"):
        GradientReducer(None, "1bit")
