"""What the training stack, not the config, decides of a step's memory (planner/memory/stack_memory.py) beyond the
loss kernel (tests/test_loss_kernels.py) and DeepSpeed's CPU checkpoints (tests/test_zero_infinity_mechanisms.py).

Reference: the code read (torchtitan's and torch's, cited in stack_memory.py) gives the tensors; the published runs
that ran that way (torchtitan's 405B FSDP x TP x PP tables) are held in tests/test_published_runs_fit.py."""

from __future__ import annotations

import pytest


def test_pipelined_fsdp_holds_the_stage_gathered_and_its_gradients_unreduced():
    """torchtitan's FSDP under torch's pipelining (planner/memory/stack_memory.py): until the step's last backward
    each rank holds its stage's parameters in bf16 and its gradients in fp32 beside the shards, at every moment but
    the optimizer step; nothing of it without pipelining, with parameters not sharded (ZeRO-1), or for our stack."""
    from planner.memory.phases import step_peak
    from planner.memory.rank_params import rank_params
    from planner.memory.stack_memory import StackMemory
    from planner.models.resolve import resolve_model
    from planner.training_config import TrainingConfig

    spec = resolve_model("llama-3.1-8b")
    torchtitan = StackMemory(unsharded_stage_under_pp=True)

    def config(zero_stage: int = 3, pp: int = 2) -> TrainingConfig:
        return TrainingConfig(
            strategy="engine", zero_stage=zero_stage, pipeline_parallel=pp, precision="bf16-mixed", micro_batch=1,
            grad_accum=4, seq_len=4096, activation_checkpointing="full",
        )  # fmt: skip

    pipelined = config()
    ours = step_peak(spec, pipelined, world_size=16, gpus_per_node=8)
    theirs = step_peak(spec, pipelined, world_size=16, gpus_per_node=8, stack=torchtitan)
    params = rank_params(spec, pipelined)
    held = params.total * 2 + params.trainable * 4
    for phase in ("forward-end", "backward-start", "backward-recompute", "backward-end"):
        assert theirs.by_phase[phase] - ours.by_phase[phase] == pytest.approx(held)
    assert theirs.by_phase["optimizer-step"] == ours.by_phase["optimizer-step"]
    assert theirs.tensor_bytes == pytest.approx(sum(theirs.per_gpu.values()), abs=8)
    for other in (config(zero_stage=1), config(pp=1)):
        same = step_peak(spec, other, world_size=16, gpus_per_node=8, stack=torchtitan)
        assert same.by_phase == step_peak(spec, other, world_size=16, gpus_per_node=8).by_phase
