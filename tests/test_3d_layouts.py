"""4 ranks through backends.initialize with our ZeRO-1 on the dp group: dp2 x tp2 (with sequence
parallelism, Llama GQA) and dp2 x pp2 (1F1B, GPT-2 with its tied embedding split across the first and last
stage); then ZeRO-2 under dp2 x pp2 and ZeRO-3 under dp2 x tp2; and tp2 x pp2 with sequence parallelism,
interleaved 1F1B and full activation checkpointing (no ZeRO: dp is 1); dp2 x tp2 of a Llama with one
key/value head, replicated on both TP ranks of each of the two TP groups. Each against the single-process
reference (SGD, fp32, 3 steps, loss and parameters within 1e-5; the engine runs' global gradient norm, summed
over dp, tp and pp with replicated and tied parameters counted once, within 1e-5 relative). And pp 4 with uneven
stages (tests/uneven_pipeline_run.py; the planner's side of them is tests/test_uneven_pipeline.py). All in one
4-rank job (tests/parallel_checks.py), as each launch costs its ranks' start-up."""

from __future__ import annotations

import pytest

from tests.parallel_checks import assert_matches_reference, run_checks

FOUR_RANK_CHECKS = [
    "engine_zero1_dp2_tp2_llama",
    "engine_zero1_dp2_pp2_gpt2",
    "engine_zero2_dp2_pp2_gpt2",
    "engine_zero3_dp2_tp2_llama",
    "tp2_pp2_sp_gpt2_interleaved",
    "dp2_tp2_llama_one_kv_head",
    "engine_resume_dp2_pp2",  # an engine checkpoint under dp2 x pp2 (fp16) resumes to the uninterrupted run
]


@pytest.fixture(scope="module")
def four_rank_results(tmp_path_factory):
    return run_checks([*FOUR_RANK_CHECKS, "uneven_pipeline"], 4, tmp_path_factory.mktemp("3d"))


@pytest.mark.slow
@pytest.mark.parametrize("check", FOUR_RANK_CHECKS)
def test_mixed_layout_matches_reference(four_rank_results, check):
    assert_matches_reference(four_rank_results[check])


@pytest.mark.slow
def test_the_engine_trains_an_uneven_map_to_the_single_process_losses(four_rank_results):
    """Uneven pipeline stages (Llama 3 405B's 126 layers over pp 16 in small): a 2, 3, 3, 2 map over 4 ranks."""
    result = four_rank_results["uneven_pipeline"]
    assert result["losses"] == pytest.approx(result["expected"], rel=1e-5)
    assert [ranges[0] for ranges in result["losses_ranges"]] == [[0, 2], [2, 5], [5, 8], [8, 10]]
    # Llama 3's layout in small: rank 0's first chunk is the embedding alone, rank 3's last the head alone.
    assert result["interleaved"] == pytest.approx(result["expected"], rel=1e-5)
    assert result["interleaved_ranges"] == [[[0, 0], [5, 6]], [[0, 2], [6, 8]], [[2, 4], [8, 10]], [[4, 5], [10, 10]]]
    # ParallelTrainer runs a pipeline layout itself (it used to ask for engine.train_batch, which it calls).
    assert len(result["trainer"]) == 3 and result["trainer"] == pytest.approx(result["trainer_expected"], rel=1e-5)
