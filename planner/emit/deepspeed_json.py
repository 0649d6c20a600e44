"""ds_config.json: the DeepSpeed config of a plan, and its HF-Trainer flavour with "auto" values.

Bucket sizes come from planner/memory/buffers.py `deepspeed_bucket_sizes`, the
same numbers the memory estimate assumes. On the CPU (gloo) the config leaves
the optimizer out: DeepSpeed's own optimizers are C++/CUDA ops it would
compile at start-up, and the training script passes torch's AdamW instead.
"""

from __future__ import annotations

from typing import Any

from ..memory.buffers import deepspeed_bucket_sizes
from ..plan import Plan
from ..training_config import ActivationCheckpointing, Offload, OptimizerKind, Precision
from .target import ADAM_BETAS, ADAM_EPS, GRADIENT_CLIPPING, WARMUP_STEPS, WEIGHT_DECAY, RunTarget

AUTO = "auto"
NVME_PATH_PLACEHOLDER = "/local_nvme"  # edit: a fast local NVMe mount on every node


def deepspeed_config(plan: Plan, target: RunTarget, *, trainer_flavour: bool = False) -> dict[str, Any]:
    """The plain config (every value fixed), or with trainer_flavour the Trainer's "auto" form."""
    auto = trainer_flavour
    config: dict[str, Any] = {
        "train_batch_size": AUTO if auto else target.global_batch,
        "train_micro_batch_size_per_gpu": AUTO if auto else target.micro_batch,
        "gradient_accumulation_steps": AUTO if auto else target.grad_accum,
        "gradient_clipping": AUTO if auto else GRADIENT_CLIPPING,
        "steps_per_print": 10,
        "wall_clock_breakdown": False,
        "zero_optimization": zero_optimization(plan, target, auto=auto),
        **precision_blocks(plan.config.precision, auto=auto),
    }
    if target.device == "cpu":
        # A client optimizer (torch AdamW) with ZeRO offload needs this switch.
        config["zero_force_ds_cpu_optimizer"] = False
    else:
        config["optimizer"] = optimizer_block(plan, target, auto=auto)
        config["scheduler"] = scheduler_block(target, auto=auto)
    checkpointing = activation_checkpointing_block(plan)
    if checkpointing:
        config["activation_checkpointing"] = checkpointing
    return config


def zero_optimization(plan: Plan, target: RunTarget, *, auto: bool = False) -> dict[str, Any]:
    config = plan.config
    buckets = deepspeed_bucket_sizes(plan.model)
    stage = config.zero_stage
    block: dict[str, Any] = {"stage": stage}
    if stage >= 1:
        block.update(
            {
                # The memory estimate counts a double-buffered reduce bucket: overlap on.
                "overlap_comm": True,
                "contiguous_gradients": True,
                "reduce_scatter": True,
                "reduce_bucket_size": AUTO if auto else buckets.reduce_bucket_size,
            }
        )
    if stage in (1, 2):
        block["allgather_partitions"] = True
        block["allgather_bucket_size"] = buckets.allgather_bucket_size
    if stage == 3:
        block.update(
            {
                "stage3_prefetch_bucket_size": AUTO if auto else buckets.stage3_prefetch_bucket_size,
                "stage3_param_persistence_threshold": AUTO if auto else buckets.stage3_param_persistence_threshold,
                "stage3_gather_16bit_weights_on_model_save": True,
            }
        )
    if config.offload_optimizer is not Offload.NONE and stage >= 1:
        block["offload_optimizer"] = _offload(config.offload_optimizer)
    if config.offload_params is not Offload.NONE and stage == 3:
        block["offload_param"] = _offload(config.offload_params)
    return block


def _offload(where: Offload) -> dict[str, Any]:
    if where is Offload.NVME:
        return {"device": "nvme", "nvme_path": NVME_PATH_PLACEHOLDER, "pin_memory": True}
    return {"device": "cpu", "pin_memory": True}


def precision_blocks(precision: Precision, *, auto: bool = False) -> dict[str, Any]:
    fp16 = precision is Precision.FP16_MIXED
    bf16 = precision in (Precision.BF16_MIXED, Precision.BF16)
    return {
        "fp16": {
            "enabled": AUTO if auto else fp16,
            # loss_scale 0 = dynamic: start at 2**16, halve on overflow, grow after a clean window.
            "loss_scale": 0,
            "initial_scale_power": 16,
            "loss_scale_window": 1000,
            "hysteresis": 2,
            "min_loss_scale": 1,
        },
        "bf16": {"enabled": AUTO if auto else bf16},
    }


def optimizer_type(kind: OptimizerKind) -> str:
    """DeepSpeed/engine optimizer name; AdamW stands in for those neither supports."""
    return "SGD" if kind is OptimizerKind.SGD else "AdamW"


def optimizer_block(plan: Plan, target: RunTarget, *, auto: bool = False) -> dict[str, Any]:
    kind = optimizer_type(plan.config.optimizer)
    if kind == "SGD":
        params: dict[str, Any] = {"lr": AUTO if auto else target.learning_rate, "momentum": 0.9}
    else:
        params = {
            "lr": AUTO if auto else target.learning_rate,
            "betas": AUTO if auto else list(ADAM_BETAS),
            "eps": AUTO if auto else ADAM_EPS,
            "weight_decay": AUTO if auto else WEIGHT_DECAY,
        }
    return {"type": kind, "params": params}


def scheduler_block(target: RunTarget, *, auto: bool = False) -> dict[str, Any]:
    return {
        "type": "WarmupLR",
        "params": {
            "warmup_min_lr": AUTO if auto else 0.0,
            "warmup_max_lr": AUTO if auto else target.learning_rate,
            "warmup_num_steps": AUTO if auto else WARMUP_STEPS,
        },
    }


def activation_checkpointing_block(plan: Plan) -> dict[str, Any] | None:
    """DeepSpeed's checkpointing settings; the HF model itself recomputes (gradient_checkpointing_enable)."""
    if plan.config.activation_checkpointing is ActivationCheckpointing.NONE:
        return None
    return {
        "partition_activations": plan.config.tensor_parallel > 1,
        "cpu_checkpointing": False,
        "contiguous_memory_optimization": False,
        "number_checkpoints": None,
        "synchronize_checkpoint_boundary": False,
        "profile": False,
    }
