"""A plan in the vocabulary the selector's users branch on (docs/selector.md).

`distributed_strategy` is "DDP", "FSDP" or "DeepSpeed" ("engine" only when the
caller allowed it, or nothing else fits). Flags the integration code tests as
booleans are booleans: `mixed_precision`, `gradient_checkpointing`,
`fsdp_config.cpu_offload`, `deepspeed_config.offload_optimizer` and
`offload_param`. Memory is in GiB (2**30 bytes); `activations_gb` is the
activations at their own peak, even when the step peaks at the optimizer step.
"""

from __future__ import annotations

from typing import Any

from planner.hardware.cluster import GIB, ClusterSpec
from planner.plan import Plan
from planner.search import SearchResult
from planner.search.strategy_layout import FSDP_LABELS, family_label
from planner.training_config import ActivationCheckpointing, FsdpSharding, Offload, Precision, Strategy

STRATEGY_NAMES = {strategy: strategy.display_name for strategy in Strategy}
TORCH_FSDP_SHARDING = {
    FsdpSharding.FULL: "FULL_SHARD",
    FsdpSharding.GRAD_OP: "SHARD_GRAD_OP",
    FsdpSharding.HYBRID: "HYBRID_SHARD",
    FsdpSharding.NONE: "NO_SHARD",
}


def _gib(value: float) -> float:
    return round(value / GIB, 3)


def estimated_memory(plan: Plan) -> dict[str, Any]:
    memory = plan.memory
    per_gpu = memory.per_gpu_bytes
    return {
        "parameters_gb": _gib(per_gpu["parameters"]),
        "gradients_gb": _gib(per_gpu["gradients"]),
        "optimizer_gb": _gib(per_gpu["optimizer_states"]),
        # At their own peak (end of forward): the total may peak later, at the optimizer step.
        "activations_gb": _gib(memory.activations_peak_bytes),
        "temporaries_gb": _gib(per_gpu["temporaries"]),
        "buffers_gb": _gib(per_gpu["buffers"]),
        "overhead_gb": _gib(per_gpu["overhead"]),
        "per_gpu_gb": _gib(per_gpu["total"]),
        "cpu_per_node_gb": _gib(memory.cpu_per_node_bytes),
        "nvme_per_node_gb": _gib(memory.nvme_per_node_bytes),  # ZeRO-Infinity's offload
        # The other figures are at the step's peak: this moment of it.
        "peak_phase": memory.peak_phase,
        "sources": dict(memory.sources),
    }


def _deepspeed_block(plan: Plan) -> dict[str, Any]:
    from planner.emit.deepspeed_json import deepspeed_config
    from planner.rundir.engine_for_run import engine_config_for_run
    from planner.rundir.run_options import run_config

    config = plan.config
    return {
        "zero_stage": config.zero_stage,
        "offload_optimizer": config.offload_optimizer is not Offload.NONE,
        "offload_param": config.offload_params is not Offload.NONE,
        "offload_device": next(
            (where.value for where in (config.offload_params, config.offload_optimizer) if where is not Offload.NONE),
            None,
        ),
        # The whole config, as `deepspeed.initialize(config=...)` and TrainingArguments(deepspeed=...) take it.
        "ds_config": deepspeed_config(plan, engine_config_for_run(plan, run_config(plan))),
    }


def _fsdp_block(plan: Plan) -> dict[str, Any]:
    config = plan.config
    return {
        "sharding_strategy": TORCH_FSDP_SHARDING[config.fsdp_sharding],
        "sharding": FSDP_LABELS[config.fsdp_sharding],
        "cpu_offload": Offload.CPU in (config.offload_params, config.offload_optimizer),
        "activation_checkpointing": config.activation_checkpointing is not ActivationCheckpointing.NONE,
    }


def _engine_block(plan: Plan) -> dict[str, Any]:
    config, layout = plan.config, plan.layout
    return {
        "data_parallel": layout.dp,
        "tensor_parallel": layout.tp,
        "pipeline_parallel": layout.pp,
        "sequence_parallel": config.sequence_parallel,
        "pipeline_schedule": config.pipeline_schedule.value,
        "virtual_stages": config.virtual_stages,
        "zero_stage": config.zero_stage,
    }


def plan_summary(plan: Plan) -> dict[str, Any]:
    """The legacy dict for one plan: strategy, batch, precision, memory, and the strategy's own block."""
    config = plan.config
    mixed = config.precision is not Precision.FP32
    summary: dict[str, Any] = {
        "fits": True,
        "distributed_strategy": STRATEGY_NAMES[config.strategy],
        "strategy_family": family_label(config),
        "gpu": plan.cluster.gpu.name,
        "gpu_memory_gb": _gib(plan.cluster.gpu.memory_bytes),
        "gpu_count": plan.cluster.world_size,
        "gpus_per_node": plan.cluster.gpus_per_node,
        "per_gpu_batch_size": config.micro_batch,
        "gradient_accumulation_steps": config.grad_accum,
        "effective_batch_size": plan.global_batch,
        "global_batch_size": plan.global_batch,
        "sequence_length": config.seq_len,
        "mixed_precision": mixed,
        "mixed_precision_dtype": config.precision.compute_dtype if mixed else None,
        "precision": config.precision.value,
        "gradient_checkpointing": config.activation_checkpointing is not ActivationCheckpointing.NONE,
        "activation_checkpointing": config.activation_checkpointing.value,
        "estimated_memory": estimated_memory(plan),
        "reasons": list(plan.reasons),
        "plan": plan,
    }
    if plan.throughput is not None:
        speed = plan.throughput
        summary["estimated_throughput"] = {
            "tokens_per_s": speed.tokens_per_s,
            "samples_per_s": speed.samples_per_s,
            "step_time_s": speed.step_time_s,
            "mfu": speed.mfu,
            "tflops_per_gpu": speed.tflops_per_gpu,
            "sources": dict(speed.sources),
        }
    block = {Strategy.DEEPSPEED: _deepspeed_block, Strategy.FSDP: _fsdp_block, Strategy.ENGINE: _engine_block}
    if config.strategy in block:
        key = {Strategy.DEEPSPEED: "deepspeed_config", Strategy.FSDP: "fsdp_config", Strategy.ENGINE: "engine_config"}
        summary[key[config.strategy]] = block[config.strategy](plan)
    return summary


def no_fit_summary(result: SearchResult, cluster: ClusterSpec) -> dict[str, Any]:
    return {
        "fits": False,
        "distributed_strategy": None,
        "gpu": cluster.gpu.name,
        "gpu_count": cluster.world_size,
        "rejected": dict(result.rejected),
        "suggestions": list(result.suggestions),
        "plan": None,
    }
