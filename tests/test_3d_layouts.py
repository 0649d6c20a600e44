"""4 ranks: dp2 x tp2 (with sequence parallelism) and dp2 x pp2 against the single-process reference."""

from __future__ import annotations

import pytest

from tests.parallel_checks import assert_matches_reference, run_checks

FOUR_RANK_CHECKS = ["dp2_tp2_llama", "dp2_pp2_gpt2"]


@pytest.fixture(scope="module")
def four_rank_results(tmp_path_factory):
    return run_checks(FOUR_RANK_CHECKS, 4, tmp_path_factory.mktemp("3d"))


@pytest.mark.slow
@pytest.mark.parametrize("check", FOUR_RANK_CHECKS)
def test_mixed_layout_matches_reference(four_rank_results, check):
    assert_matches_reference(four_rank_results[check])
