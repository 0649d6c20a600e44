"""engine.json: the DeepSpeed-style config our engine (backends/) runs, plus its own "hardware_selector" block.

The DeepSpeed keys use the same values as ds_config.json would; the block
DeepSpeed ignores carries what only our engine needs: the model's HF config,
the device and the TP x PP x DP layout (contract 6 in the developers' brief).
"""

from __future__ import annotations

from typing import Any

from ..memory.buffers import deepspeed_bucket_sizes
from ..plan import Plan
from ..training_config import Offload, Strategy
from .deepspeed_json import optimizer_block, precision_blocks, scheduler_block
from .target import GRADIENT_CLIPPING, RunTarget

ENGINE_SCHEMA_VERSION = 1


def engine_config(plan: Plan, target: RunTarget) -> dict[str, Any] | None:
    """The engine.json document, or None when the plan runs on another backend."""
    if plan.config.strategy is not Strategy.ENGINE:
        return None
    config = plan.config
    buckets = deepspeed_bucket_sizes(plan.model)
    offload = "cpu" if config.offload_optimizer is not Offload.NONE else "none"
    return {
        "train_batch_size": target.global_batch,
        "train_micro_batch_size_per_gpu": target.micro_batch,
        "gradient_accumulation_steps": target.grad_accum,
        "optimizer": optimizer_block(plan, target),
        "scheduler": scheduler_block(target),
        "zero_optimization": {
            "stage": config.zero_stage,
            "offload_optimizer": {"device": offload},
            "overlap_comm": config.zero_stage >= 1,
            "reduce_bucket_size": buckets.reduce_bucket_size,
            "allgather_bucket_size": buckets.allgather_bucket_size,
            "stage3_prefetch_bucket_size": buckets.stage3_prefetch_bucket_size,
        },
        **precision_blocks(config.precision),
        "gradient_clipping": GRADIENT_CLIPPING,
        "steps_per_print": 10,
        "hardware_selector": {
            "schema_version": ENGINE_SCHEMA_VERSION,
            "model": {"name": target.model_name, "hf_config": target.hf_config},
            "seq_len": target.seq_len,
            "device": target.device,
            "dist_backend": target.dist_backend,
            "activation_checkpointing": config.activation_checkpointing.value,
            "layout": {
                "data_parallel": target.data_parallel,
                "tensor_parallel": target.tensor_parallel,
                "pipeline_parallel": target.pipeline_parallel,
                "sequence_parallel": config.sequence_parallel,
                "pipeline_schedule": config.pipeline_schedule.value,
                "virtual_stages": config.virtual_stages,
                "stage_split": None,
            },
        },
    }
