"""training_args.json for the HF Trainer: TrainingArguments' keyword arguments for a plan and its run.

`deepspeed` names ds_config_trainer.json (the "auto" flavour, filled by the
Trainer from these same arguments). planner/rundir/training_arguments.py
builds the real transformers.TrainingArguments from the same keywords.
"""

from __future__ import annotations

from typing import Any

from planner.contract.choices import (
    ActivationCheckpointing,
    FsdpSharding,
    KernelChoice,
    Offload,
    OptimizerKind,
    Strategy,
)
from planner.contract.run_config import SGD_MOMENTUM, RunConfig
from planner.plan import Plan

DS_TRAINER_CONFIG_FILE = "ds_config_trainer.json"

_TRAINER_OPTIMIZER = {
    OptimizerKind.ADAMW: "adamw_torch",
    OptimizerKind.ADAMW_8BIT: "adamw_bnb_8bit",
    OptimizerKind.ADAFACTOR: "adafactor",
    OptimizerKind.SGD: "sgd",
    OptimizerKind.LION: "lion_32bit",
}


_TRAINER_SCHEDULE = {"cosine": "cosine_with_min_lr", "linear": "linear", "constant": "constant_with_warmup"}


def training_args_kwargs(plan: Plan, target: RunConfig, output_dir: str, *, deepspeed: Any) -> dict[str, Any] | None:
    """TrainingArguments keywords; `deepspeed` is the file name (JSON) or the config dict (Python)."""
    config = plan.config
    if config.strategy is Strategy.ENGINE:
        return None  # tensor/pipeline parallel plans run on our engine, not the Trainer
    uses_fsdp = config.strategy is Strategy.FSDP
    optim = target.optim
    recompute = config.activation_checkpointing is not ActivationCheckpointing.NONE
    kwargs: dict[str, Any] = {
        "output_dir": output_dir,
        "per_device_train_batch_size": target.micro_batch,
        "gradient_accumulation_steps": target.grad_accum,
        "learning_rate": optim.learning_rate,
        "weight_decay": optim.weight_decay,
        "adam_beta1": optim.betas[0],
        "adam_beta2": optim.betas[1],
        "adam_epsilon": optim.eps,
        "max_grad_norm": optim.gradient_clipping,
        # The runner's warmup (warmup_for: 5% of the run, at most 100) as an integer whenever the step count is
        # known; a run of epochs gets the 5% as a ratio (a float below 1), which cannot carry the cap
        # (docs/emitted-files.md). The runner's --trainer door sets warmup_for(its step count) itself.
        "warmup_steps": (
            optim.warmup_for(optim.max_steps) if optim.max_steps or optim.warmup_steps is not None else 0.05
        ),
        "lr_scheduler_type": _TRAINER_SCHEDULE[optim.schedule],
        **({"lr_scheduler_kwargs": {"min_lr_rate": optim.min_lr_ratio}} if optim.schedule == "cosine" else {}),
        **({"max_steps": optim.max_steps} if optim.max_steps else {"num_train_epochs": optim.epochs}),
        "optim": _TRAINER_OPTIMIZER[config.optimizer],
        # The Trainer's "sgd" is torch's SGD at momentum 0, with no state: the plan counts a momentum buffer, and
        # the run folder's SGD keeps one (planner/rundir/hyperparameters.py), so the Trainer gets the same.
        **({"optim_args": f"momentum={SGD_MOMENTUM}"} if config.optimizer is OptimizerKind.SGD else {}),
        "bf16": target.mixed_precision == "bf16",
        "fp16": target.mixed_precision == "fp16",
        # FSDP recomputes through its own wrapper (fsdp_config); the Trainer refuses both at once.
        checkpointing_argument(): recompute and not uses_fsdp,
        "use_cpu": target.device == "cpu" and config.strategy is Strategy.DDP,
        "logging_steps": 10,
        "save_strategy": "no",
        "report_to": "none",
        "dataloader_num_workers": 0,
        "seed": optim.seed,
        # The planned kernel stack (docs/search.md, "Kernels"): the Trainer compiles, or patches in Liger.
        **({"torch_compile": True} if config.kernels is KernelChoice.COMPILE else {}),
        **({"use_liger_kernel": True} if config.kernels is KernelChoice.LIGER else {}),
    }
    if uses_fsdp:
        kwargs["fsdp"] = True
        kwargs["fsdp_config"] = trainer_fsdp_config(plan, target)
    if config.strategy is Strategy.DEEPSPEED:
        kwargs["deepspeed"] = deepspeed
    return kwargs


def checkpointing_argument() -> str:
    """transformers 5 renamed gradient_checkpointing to activation_checkpointing (the old name warns)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major = int(version("transformers").split(".")[0])
    except (PackageNotFoundError, ValueError):
        major = 5
    return "activation_checkpointing" if major >= 5 else "gradient_checkpointing"


def trainer_fsdp_config(plan: Plan, target: RunConfig) -> dict[str, Any]:
    config = plan.config
    sharding = config.fsdp_sharding
    block: dict[str, Any] = {
        "transformer_layer_cls_to_wrap": target.model.block_class.split(",") if target.model.block_class else [],
        "cpu_offload": Offload.CPU in (config.offload_params, config.offload_optimizer),
        "activation_checkpointing": config.activation_checkpointing is not ActivationCheckpointing.NONE,
        "state_dict_type": "SHARDED_STATE_DICT",
        "cpu_ram_efficient_loading": False,
    }
    if sharding.fsdp2:
        block.update(version=2, reshard_after_forward=sharding is FsdpSharding.FULL)
    else:
        block.update(version=1, reshard_after_forward={FsdpSharding.HYBRID: "hybrid_shard"}.get(sharding, "no_shard"))
    return block


def training_args_json_document(plan: Plan, target: RunConfig) -> dict[str, Any] | None:
    return training_args_kwargs(plan, target, "output", deepspeed=DS_TRAINER_CONFIG_FILE)
