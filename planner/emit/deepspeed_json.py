"""ds_config.json: the DeepSpeed config of a plan, rendered from the run's EngineConfig, and its HF-Trainer
flavour with "auto" values.

Every number DeepSpeed shares with our engine is the EngineConfig's (planner/rundir/engine_for_run.py derives
it once; engine.json is the same config): batch sizes, clipping, optimizer, scheduler, ZeRO stage and bucket
sizes, so DeepSpeed and our engine apply the same update. DeepSpeed's own extras (persistence threshold,
offload devices, checkpointing block) come from the plan. On the CPU (gloo) the config leaves the optimizer
out: DeepSpeed's own optimizers are C++/CUDA ops it would compile at start-up, and the training script passes
torch's AdamW instead.
"""

from __future__ import annotations

from typing import Any

from planner.contract.choices import ActivationCheckpointing, Offload, Precision
from planner.contract.engine_config import EngineConfig
from planner.memory.buffers import deepspeed_bucket_sizes
from planner.plan import Plan
from planner.throughput.zeropp import hpz_size

AUTO = "auto"
NVME_PATH_PLACEHOLDER = "/local_nvme"  # edit: a fast local NVMe mount on every node


def deepspeed_config(plan: Plan, engine: EngineConfig, *, trainer_flavour: bool = False) -> dict[str, Any]:
    """The plain config (every value fixed), or with trainer_flavour the Trainer's "auto" form.

    The scheduler block is written when the run's length is known (--steps); a run sized in epochs
    gets its schedule from the runner once the data are tokenized."""
    auto = trainer_flavour
    config: dict[str, Any] = {
        "train_batch_size": AUTO if auto else engine.train_batch_size,
        "train_micro_batch_size_per_gpu": AUTO if auto else engine.train_micro_batch_size_per_gpu,
        "gradient_accumulation_steps": AUTO if auto else engine.gradient_accumulation_steps,
        "gradient_clipping": AUTO if auto else engine.gradient_clipping,
        "steps_per_print": engine.steps_per_print,
        "wall_clock_breakdown": False,
        "zero_optimization": zero_optimization(plan, engine, auto=auto),
        **precision_blocks(plan.config.precision, auto=auto),
    }
    if engine.hardware_selector.device == "cpu":
        # A client optimizer (torch AdamW) with ZeRO offload needs this switch.
        config["zero_force_ds_cpu_optimizer"] = False
    else:
        config["optimizer"] = optimizer_block(engine, auto=auto)
    # The Trainer flavour has no scheduler: the Trainer builds the run's (lr_scheduler_type in training_args.json).
    scheduler = (
        None if auto or engine.scheduler is None else engine.scheduler.model_dump(mode="json", exclude_unset=True)
    )
    if scheduler is not None:
        config["scheduler"] = scheduler
    checkpointing = activation_checkpointing_block(plan)
    if checkpointing:
        config["activation_checkpointing"] = checkpointing
    return config


def zero_optimization(plan: Plan, engine: EngineConfig, *, auto: bool = False) -> dict[str, Any]:
    """DeepSpeed's zero_optimization block: the engine config's stage and buckets, and DeepSpeed's own extras."""
    config, zero = plan.config, engine.zero_optimization
    stage = zero.stage
    block: dict[str, Any] = {"stage": stage}
    if stage >= 1:
        block.update(
            {
                # The memory estimate counts a double-buffered reduce bucket: overlap on.
                "overlap_comm": True,
                "contiguous_gradients": True,
                "reduce_scatter": True,
                "reduce_bucket_size": AUTO if auto else zero.reduce_bucket_size,
            }
        )
    if stage in (1, 2):
        block["allgather_partitions"] = True
        block["allgather_bucket_size"] = zero.allgather_bucket_size
    if stage == 3:
        block.update(
            {
                "stage3_prefetch_bucket_size": AUTO if auto else zero.stage3_prefetch_bucket_size,
                # not an engine setting: DeepSpeed's alone, from the same bucket sizes the memory estimate uses
                "stage3_param_persistence_threshold": AUTO
                if auto
                else deepspeed_bucket_sizes(plan.model).stage3_param_persistence_threshold,
                "stage3_gather_16bit_weights_on_model_save": True,
            }
        )
    if config.offload_optimizer is not Offload.NONE and stage >= 1:
        block["offload_optimizer"] = _offload(config.offload_optimizer)
    if config.offload_params is not Offload.NONE and stage == 3:
        block["offload_param"] = _offload(config.offload_params)
    if config.zeropp and stage == 3:  # DeepSpeed's ZeRO++ keys, as its tutorial sets them (throughput/zeropp.py)
        block.update(
            {
                "zero_quantized_weights": True,
                # hpZ over the node's GPUs where the ranks span nodes; 1 (off) inside one node
                "zero_hpz_partition_size": hpz_size(plan.cluster.world_size, plan.cluster.gpus_per_node),
                "zero_quantized_gradients": True,
            }
        )
    return block


def _offload(where: Offload) -> dict[str, Any]:
    if where is Offload.NVME:
        return {"device": "nvme", "nvme_path": NVME_PATH_PLACEHOLDER, "pin_memory": True}
    return {"device": "cpu", "pin_memory": True}


# The optimizer settings the HF Trainer fills where the config says "auto" (transformers' integrations/deepspeed.py,
# trainer_config_process): any other "auto" reaches the optimizer as a string (SGD's momentum: a TypeError).
TRAINER_FILLED_PARAMS = ("lr", "betas", "eps", "weight_decay")


def optimizer_block(engine: EngineConfig, *, auto: bool = False) -> dict[str, Any]:
    block = engine.optimizer.model_dump(mode="json")
    wanted = ("lr", "momentum", "weight_decay") if block["type"] == "SGD" else ("lr", "betas", "eps", "weight_decay")
    block["params"] = {key: AUTO if auto and key in TRAINER_FILLED_PARAMS else block["params"][key] for key in wanted}
    return block


def activation_checkpointing_block(plan: Plan) -> dict[str, Any] | None:
    """DeepSpeed's checkpointing settings; the HF model itself recomputes (gradient_checkpointing_enable)."""
    if plan.config.activation_checkpointing is ActivationCheckpointing.NONE:
        return None
    return {
        "partition_activations": False,
        "cpu_checkpointing": False,
        "contiguous_memory_optimization": False,
        "number_checkpoints": None,
        "synchronize_checkpoint_boundary": False,
        "profile": False,
    }


def precision_blocks(precision: Precision, *, auto: bool = False) -> dict[str, Any]:
    """DeepSpeed's fp16 and bf16 blocks; auto: the HF Trainer's flavour, which fills `enabled` itself."""
    fp16 = precision is Precision.FP16_MIXED
    bf16 = precision in (Precision.BF16_MIXED, Precision.BF16)
    return {
        "fp16": {
            "enabled": "auto" if auto else fp16,
            # loss_scale 0 = dynamic: start at 2**16, halve on overflow, grow after a clean window.
            "loss_scale": 0,
            "initial_scale_power": 16,
            "loss_scale_window": 1000,
            "hysteresis": 2,
            "min_loss_scale": 1,
        },
        "bf16": {"enabled": "auto" if auto else bf16},
    }
