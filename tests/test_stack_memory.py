"""What the training stack, not the config, decides of a step's memory (planner/memory/stack_memory.py) beyond the
loss kernel (tests/test_loss_kernels.py) and DeepSpeed's CPU checkpoints (tests/test_zero_infinity_mechanisms.py).

Reference: the code read (torchtitan's and torch's, cited in stack_memory.py) gives the tensors, 6 bytes a
parameter of the stage (bf16 gathered, fp32 unreduced gradients), counted here from the model's published size;
the published runs that ran that way (torchtitan's 405B FSDP x TP x PP tables) are held in
tests/test_published_runs_fit.py."""

from __future__ import annotations

import pytest

from planner.memory.phases import PHASES, step_peak
from planner.memory.stack_memory import StackMemory
from planner.models.resolve import resolve_model
from planner.training_config import TrainingConfig

TORCHTITAN = StackMemory(unsharded_stage_under_pp=True)
# Llama 3.1 8B (its config.json): 32 blocks, a 128,256 x 4,096 embedding and an untied head of the same size.
BLOCKS, EMBEDDING = 32, 128_256 * 4_096
TOTAL = 8_030_261_248  # parameters, the published count


def _config(zero_stage: int = 3, pp: int = 2, fp8: bool = False) -> TrainingConfig:
    return TrainingConfig(
        strategy="engine", zero_stage=zero_stage, pipeline_parallel=pp, precision="bf16-mixed", micro_batch=1,
        grad_accum=4, seq_len=4096, activation_checkpointing="full", fp8=fp8,
    )  # fmt: skip


def _peaks(config: TrainingConfig):
    spec = resolve_model("llama-3.1-8b")
    return (
        step_peak(spec, config, world_size=16, gpus_per_node=8),
        step_peak(spec, config, world_size=16, gpus_per_node=8, stack=TORCHTITAN),
    )


def test_pipelined_fsdp_holds_the_stage_gathered_and_its_gradients_unreduced():
    """Until the step's last backward the first of 2 stages holds its 16 blocks and the embedding gathered in bf16
    and their gradients in fp32, 6 bytes a parameter, in place of the sharded gradients accumulated between
    micro-batches; the optimizer step is unchanged; the categories still sum to the peak."""
    ours, theirs = _peaks(_config())
    stage = (TOTAL - 2 * EMBEDDING) / BLOCKS * (BLOCKS // 2) + EMBEDDING
    assert ours.phase in ("forward-end", "backward-start", "backward-recompute")
    sharded_accumulation = ours.per_gpu["gradients"]  # what our ZeRO-3 accumulates between micro-batches
    assert sharded_accumulation > 0
    for phase in ("forward-end", "backward-start", "backward-recompute"):
        added = theirs.by_phase[phase] - ours.by_phase[phase]
        assert added + sharded_accumulation == pytest.approx(6 * stage, rel=2e-4), phase
    assert theirs.by_phase["optimizer-step"] == ours.by_phase["optimizer-step"]
    assert sum(theirs.per_gpu.values()) == pytest.approx(theirs.by_phase[theirs.phase])
    assert any("pipelined FSDP as torchtitan runs it" in note for note in theirs.notes)


def test_the_estimate_names_the_unsharded_stage_in_its_buffers_source():
    from planner.evaluate import memory_on
    from planner.hardware.cluster import make_cluster
    from planner.memory.stack_memory import OURS

    spec, cluster = resolve_model("llama-3.1-8b"), make_cluster("H100-80GB", gpus_per_node=8, nodes=2)
    theirs = memory_on(spec, _config(), cluster, stack=TORCHTITAN)
    ours = memory_on(spec, _config(), cluster, stack=OURS)
    assert "pipelined stage's parameters gathered" in theirs.sources["buffers"]
    assert "pipelined stage" not in ours.sources["buffers"]


def test_fp8_gathered_weights_are_not_counted_twice():
    """Under FP8 the blocks' matmul weights are gathered as FP8 (with their transposes, already counted as the FP8
    weights): the unsharded stage holds 2 bytes less for each of them than in bf16."""
    bf16_ours, bf16_theirs = _peaks(_config())
    fp8_ours, fp8_theirs = _peaks(_config(fp8=True))
    matmul_weights = (TOTAL - 2 * EMBEDDING - BLOCKS * 2 * 4_096 - 4_096) / BLOCKS * (BLOCKS // 2)  # less the norms
    bf16_added = bf16_theirs.by_phase["backward-start"] - bf16_ours.by_phase["backward-start"]
    fp8_added = fp8_theirs.by_phase["backward-start"] - fp8_ours.by_phase["backward-start"]
    assert bf16_added - fp8_added == pytest.approx(2 * matmul_weights, rel=2e-4)


@pytest.mark.parametrize("config", [_config(zero_stage=1), _config(pp=1)], ids=["parameters-not-sharded", "no-pp"])
def test_nothing_changes_without_pipelining_or_sharded_parameters(config):
    ours, theirs = _peaks(config)
    assert {phase: theirs.by_phase[phase] for phase in PHASES} == {phase: ours.by_phase[phase] for phase in PHASES}
