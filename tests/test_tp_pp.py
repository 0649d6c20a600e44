"""Tensor and pipeline parallelism against a single-process reference (fp32, gloo, 2 ranks).

One torchrun job (tests/parallel_checks.py) trains tiny GPT-2, Llama (GQA:
4 heads, 2 KV heads) and OPT models for 3 SGD steps under each layout and
compares losses and every parameter shard with the unsharded model trained
on the same batches in the same process.
"""

from __future__ import annotations

import pytest
import torch

from backends.parallel_dims import ParallelDims
from backends.pipeline_parallel.split import stage_layer_ranges
from backends.tensor_parallel.layers import shard_tensor, unshard_tensor
from planner.errors import UserInputError
from tests.parallel_checks import assert_matches_reference, run_checks

TWO_RANK_CHECKS = [
    "tp_gpt2",
    "tp_llama",
    "tp_opt",
    "tp_sp_gpt2",
    "tp_sp_llama",
    "tp_sp_opt",
    "tp_sp_qwen2",
    "tp_sp_mistral",
    "tp_sp_qwen3",
    "tp_sp_gpt2_odd_vocab",
    "tp_sp_llama_one_kv_head",
    "pp_gpt2_gpipe",
    "pp_gpt2_1f1b",
    "pp_llama_gpipe",
    "pp_llama_1f1b",
    "pp_opt_1f1b",
    "pp_llama_interleaved",
    "tp_sp_llama_full_checkpointing",
    "tp_sp_llama_op_checkpointing",
    "pp_gpt2_1f1b_op_checkpointing",
    "tp_gpt2_selective_checkpointing",
    "reshard_tp2_to_pp2",
    "engine_resume_tp2",
    "engine_clip_tp2_llama",
    "engine_clip_pp2_gpt2_interleaved",
    "engine_resume_pp2",
    "engine_export_pp2_gpt2",
    "engine_export_tp2_llama",
    "engine_reshard_tp2_to_pp2_gpt2_odd_vocab",
    "engine_reshard_pp2_to_tp2_llama_one_kv_head",
]


@pytest.fixture(scope="module")
def two_rank_results(tmp_path_factory):
    names = TWO_RANK_CHECKS + ["engine_fp16_overflow_tp2_llama"]
    return run_checks(names, 2, tmp_path_factory.mktemp("tp_pp"))


@pytest.mark.slow
@pytest.mark.parametrize("check", TWO_RANK_CHECKS)
def test_layout_matches_single_process_reference(two_rank_results, check):
    assert_matches_reference(two_rank_results[check])


@pytest.mark.slow
def test_weights_saved_under_tp2_continue_under_pp2(two_rank_results):
    result = two_rank_results["reshard_tp2_to_pp2"]
    assert len(result["losses"]) == 2  # steps 4 and 5, run under pp2 from the tp2 file
    assert (
        result["wrong_model_error"]
        == "the checkpoint has no tensor 'model.embed_tokens.weight'; it was saved from another model"
    )


@pytest.mark.slow
def test_engine_resume_under_pp_restores_each_stage_loss_scale_and_schedule(two_rank_results):
    result = two_rank_results["engine_resume_pp2"]  # fp16, WarmupLR, AdamW, resumed after step 2 of 3
    assert result["scale_diff"] == 0.0 and result["lr_diff"] == 0.0, result
    assert result["loss_scale"] == 2.0**4 * 4  # doubled after steps 2 and 3: restored, not started over


@pytest.mark.slow
def test_engine_checkpoint_resumes_under_another_tp_pp_layout(two_rank_results):
    for check in ("engine_reshard_tp2_to_pp2_gpt2_odd_vocab", "engine_reshard_pp2_to_tp2_llama_one_kv_head"):
        result = two_rank_results[check]  # loss and full weights: assert_matches_reference
        assert result["lr_diff"] == 0.0 and len(result["losses"]) == 3, result


@pytest.mark.slow
@pytest.mark.parametrize("check", ["engine_export_pp2_gpt2", "engine_export_tp2_llama"])
def test_engine_export_under_tp_pp_loads_into_hf_as_the_reference_weights(two_rank_results, check):
    result = two_rank_results[check]
    assert result["export_diff"] < 1e-5, result
    tied = {"lm_head.weight"} if check.endswith("gpt2") else set()  # a tied head is written once, as HF does
    assert result["exported_keys"] == sorted(set(result["reference_keys"]) - tied)


@pytest.mark.slow
@pytest.mark.parametrize("check", ["engine_clip_tp2_llama", "engine_clip_pp2_gpt2_interleaved"])
def test_engine_clipping_was_active_and_used_the_whole_models_norm(two_rank_results, check):
    result = two_rank_results[check]  # matching the reference (above) needs the same clip factor on every rank
    assert min(result["reference_grad_norms"]) > 0.05 * 10, result  # clip 0.05: every step scaled by < 0.1
    assert result["grad_norm_rel_diff"] < 1e-5, result


@pytest.mark.slow
def test_fp16_overflow_on_one_tp_rank_skips_the_step_on_every_rank(two_rank_results):
    result = two_rank_results["engine_fp16_overflow_tp2_llama"]
    assert result["skipped_lowest"] == result["skipped_highest"] == [0.0, 1.0, 0.0], result
    assert result["scales"] == [256.0, 128.0, 128.0]  # hysteresis 1: the skipped step halves the scale


def test_fused_qkv_shard_roundtrip():
    full = torch.arange(4 * 12.0).reshape(4, 12)  # GPT-2 c_attn: [in, q|k|v]
    parts = [shard_tensor(full, 1, rank, 2, sections=3) for rank in range(2)]
    assert parts[0][:, :2].tolist() == full[:, 0:2].tolist()  # rank 0 gets the first q half ...
    assert parts[0][:, 2:4].tolist() == full[:, 4:6].tolist()  # ... then the first k half
    assert torch.equal(unshard_tensor(parts, 1, sections=3), full)


def test_stage_split_balances_embedding_and_head_cost():
    assert stage_layer_ranges(8, 2) == [(0, 4), (4, 8)]
    # A head costing two layers pushes two layers to the first stage.
    assert stage_layer_ranges(8, 2, last_extra=2.0) == [(0, 5), (5, 8)]
    assert stage_layer_ranges(6, 3, [1, 2, 3]) == [(0, 1), (1, 3), (3, 6)]
    # Uneven counts go to the middle stages when the ends carry embedding / head work.
    assert stage_layer_ranges(30, 4, first_extra=0.5, last_extra=0.5) == [(0, 7), (7, 15), (15, 23), (23, 30)]
    with pytest.raises(UserInputError, match="summing to 6"):
        stage_layer_ranges(6, 2, [1, 2])


def test_plan_stage_split_per_rank_becomes_interleaved_chunks():
    from backends.pipeline_parallel.stages import per_virtual_stage

    # Rank 0 runs 5 layers, rank 1 runs 3; with 2 chunks each, stage c * pp + r is chunk c of rank r.
    assert per_virtual_stage([5, 3], 2, 2) == [3, 2, 2, 1]
    assert per_virtual_stage([1, 1, 1, 1], 2, 2) == [1, 1, 1, 1]
    assert per_virtual_stage(None, 2, 2) is None


def test_parallel_dims_checks_world_and_node():
    from pydantic import ValidationError

    from backends.parallel_dims import check_fits

    check_fits(ParallelDims(dp=2, tp=2, pp=1), 4, gpus_per_node=8)
    with pytest.raises(UserInputError, match="launch 8 ranks"):
        check_fits(ParallelDims(dp=2, tp=2, pp=2), 4)
    with pytest.raises(UserInputError, match="inside a node"):
        check_fits(ParallelDims(dp=1, tp=3), 3, gpus_per_node=4)
    with pytest.raises(ValidationError):
        ParallelDims(dp=0)
    with pytest.raises(ValidationError, match="ep 2 must divide dp 3"):
        ParallelDims(dp=3, ep=2)
    assert ParallelDims.model_validate({"dp": 2, "tp": 2, "pp": 1}).world_size == 4
    assert ParallelDims(dp=2, tp=2).with_world_size(8) == ParallelDims(dp=4, tp=2)
