"""The EngineConfig of a run: the settings every adapter shares, computed from the plan and its RunConfig.

engine.json is this config for engine plans. The runner builds it for every
strategy: DDP and FSDP take the optimizer, clipping, precision and batch
keys from it, and a run whose strategy is overridden (`--strategy engine` on
a DDP folder) gets the engine settings the emitter would have written.
"""

from __future__ import annotations

from planner.contract.choices import FsdpSharding, Offload, Strategy
from planner.contract.engine_config import (
    CheckpointBlock,
    EngineConfig,
    HardwareSelectorBlock,
    ModelBlock,
    OffloadOptimizer,
    ZeroBlock,
)
from planner.contract.run_config import RunConfig
from planner.emit.deepspeed_json import precision_blocks
from planner.gradient_compression import warmup_steps
from planner.memory.buffers import deepspeed_bucket_sizes
from planner.plan import Plan
from planner.rundir.hyperparameters import optimizer_block, scheduler_block

# An FSDP plan run on our engine (`train --strategy engine`, setup_distributed_training) shards the same states
# as the ZeRO stage (docs/engine.md): the runner ran it at ZeRO-0 while the Python door ran ZeRO-3 (an audit).
FSDP_AS_ZERO = {FsdpSharding.FULL: 3, FsdpSharding.HYBRID: 3, FsdpSharding.GRAD_OP: 2, FsdpSharding.NONE: 0}


def zero_stage_of(plan: Plan) -> int:
    """The ZeRO stage our engine runs the plan at: its own, an FSDP plan's sharding's, else 0 (DDP)."""
    config = plan.config
    if config.strategy in (Strategy.ENGINE, Strategy.DEEPSPEED):
        return config.zero_stage
    return FSDP_AS_ZERO[config.fsdp_sharding] if config.strategy is Strategy.FSDP else 0


def engine_config_for_run(plan: Plan, run: RunConfig, total_steps: int | None = None) -> EngineConfig:
    """The engine config of this run (scheduler only once its length is known)."""
    config = plan.config
    stage = zero_stage_of(plan)
    buckets = deepspeed_bucket_sizes(plan.model)
    offload = "cpu" if config.offload_optimizer is not Offload.NONE else "none"
    precision = precision_blocks(config.precision)
    return EngineConfig(
        train_batch_size=run.global_batch,
        train_micro_batch_size_per_gpu=run.micro_batch,
        gradient_accumulation_steps=run.grad_accum,
        optimizer=optimizer_block(run.optim, config.optimizer),
        scheduler=scheduler_block(run.optim, total_steps),
        zero_optimization=ZeroBlock(
            stage=stage,
            offload_optimizer=OffloadOptimizer(device=offload),
            overlap_comm=stage >= 1,
            reduce_bucket_size=buckets.reduce_bucket_size,
            allgather_bucket_size=buckets.allgather_bucket_size,
            stage3_prefetch_bucket_size=buckets.stage3_prefetch_bucket_size,
        ),
        fp16=precision["fp16"],
        bf16=precision["bf16"],
        gradient_clipping=run.optim.gradient_clipping,
        steps_per_print=10,
        hardware_selector=HardwareSelectorBlock(
            model=ModelBlock(name=run.model.name, hf_config=run.model.hf_config),
            seq_len=run.seq_len,
            device=run.device,
            dist_backend=run.dist_backend,
            activation_checkpointing=config.activation_checkpointing.value,
            kernels=config.kernels.value,
            compression=config.compression.value,
            compression_warmup_steps=warmup_steps(config.compression, run.optim.max_steps),
            layout=run.layout,
            sequence_parallel=config.sequence_parallel,
            expert_capacity_factor=config.routing.capacity_factor,
            pipeline_schedule=config.pipeline_schedule.value,
            checkpoint=CheckpointBlock(keep_last=run.checkpoint.keep_last),
        ),
    )
