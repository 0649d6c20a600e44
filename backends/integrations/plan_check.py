"""Does a framework's configuration run the plan? The differences, as short phrases for one line.

The HF Trainer callback and the Lightning strategy both ask it before the
first step; the plan's numbers come from its RunConfig (planner/contract),
the framework's from its own objects, read here and nowhere else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planner.contract.run_config import RunConfig
from planner.plan import Plan
from planner.training_config import ActivationCheckpointing, FsdpSharding, Offload, Strategy

# How a difference in the rank count begins: it comes first and carries its own fix (the launch), since
# rebuilding the arguments from the plan, the fix of every other difference, does not change the rank count.
RANKS_DIFFER = "the plan has "


def torchrun_launch(run: RunConfig) -> str:
    """The launch that gives the plan's rank count, for a script that builds its arguments from the plan."""
    nodes = f" --nnodes={run.num_nodes}" if run.num_nodes > 1 else ""
    return f"launch with torchrun{nodes} --nproc_per_node={run.nproc_per_node}"


def batch_differences(run: RunConfig, *, micro: int, accum: int, world: int, launch: str | None = None) -> list[str]:
    """The global batch must be the plan's; the micro-batch (memory) too when the world is the plan's.

    When the rank count alone makes the global batch another (the plan's own micro-batch and accumulation on
    another number of processes), that is said instead, with `launch` (default: torchrun's) as its fix; another
    world with the plan's global batch (more accumulation on fewer ranks) is no difference."""
    found = []
    if micro * accum * world != run.global_batch:
        if world != run.world_size:
            fix = launch or torchrun_launch(run)
            found.append(f"{RANKS_DIFFER}{run.world_size} ranks, this run {world}: {fix} (or plan again for {world})")
        if micro * accum * run.world_size != run.global_batch or world == run.world_size:
            found.append(
                f"global batch {micro} x {accum} x {world} ranks = {micro * accum * world} (plan {run.global_batch})"
            )
    if world == run.layout.data_parallel:
        if micro != run.micro_batch:
            found.append(f"micro-batch {micro} (plan {run.micro_batch})")
        if accum != run.grad_accum:
            found.append(f"gradient accumulation {accum} (plan {run.grad_accum})")
    return found


# Selective and op-level checkpointing run only through our wrapper on the model: a phrase with its own fix.
OURS_ONLY = "which runs only through our wrapper"


def mismatch_line(subject: str, found: list[str], fix: str) -> str:
    """`subject: the differences; fix`, the rank count's own fix first (RANKS_DIFFER) and `fix` (rebuilding the
    arguments from the plan) only when some other difference needs it (a checkpointing phrase with OURS_ONLY
    carries its own: rebuilding the arguments turns the Trainer's whole-block recompute back on)."""
    others = [phrase for phrase in found if not phrase.startswith(RANKS_DIFFER) and OURS_ONLY not in phrase]
    return f"{subject}: {'; '.join(found)}" + (f"; {fix}" if others else "")


# The plan's mixed precision as Lightning's Trainer names it.
LIGHTNING_PRECISION = {"no": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}


def lightning_differences(trainer: Any, run: RunConfig, *, micro: int) -> list[str]:
    """What a lightning.Trainer (with `micro` sequences per batch) runs differently from the plan."""
    launch = f"pass devices={run.nproc_per_node}, num_nodes={run.num_nodes} (plan_trainer_kwargs(plan) sets them)"
    accum, world = trainer.accumulate_grad_batches, trainer.world_size
    found = batch_differences(run, micro=micro, accum=accum, world=world, launch=launch)
    precision = str(trainer.precision)
    if precision != LIGHTNING_PRECISION[run.mixed_precision]:
        found.append(f"precision {precision} (plan {LIGHTNING_PRECISION[run.mixed_precision]})")
    return found


def precision_difference(run: RunConfig, found: str) -> list[str]:
    """found: 'no', 'fp16' or 'bf16', as the Trainer and accelerate name it."""
    return [] if found == run.mixed_precision else [f"mixed precision {found} (plan {run.mixed_precision})"]


def trainer_differences(args: Any, plan: Plan, run: RunConfig, model: Any = None) -> list[str]:
    """What a transformers.TrainingArguments (and the model it trains, when given) does differently from the plan."""
    found = batch_differences(
        run, micro=args.per_device_train_batch_size, accum=args.gradient_accumulation_steps, world=args.world_size
    )
    found += precision_difference(run, "bf16" if args.bf16 else "fp16" if args.fp16 else "no")
    ds_config = _deepspeed_config(args)
    strategy = Strategy.DEEPSPEED if ds_config is not None else Strategy.FSDP if args.fsdp else Strategy.DDP
    wanted = plan.config.strategy
    if strategy is not wanted:
        return [*found, f"strategy {strategy.value} (plan {wanted.value})"]
    recompute = bool(getattr(args, "activation_checkpointing", False) or getattr(args, "gradient_checkpointing", False))
    if strategy is Strategy.DEEPSPEED and ds_config is not None:
        zero = ds_config.get("zero_optimization", {})
        if int(zero.get("stage", 0)) != plan.config.zero_stage:
            found.append(f"ZeRO stage {zero.get('stage', 0)} (plan {plan.config.zero_stage})")
        offloaded = zero.get("offload_optimizer", {}).get("device", "none") not in ("none", None)
        if offloaded != (plan.config.offload_optimizer is not Offload.NONE):
            found.append(
                f"optimizer offload {'on' if offloaded else 'off'} (plan {plan.config.offload_optimizer.value})"
            )
    if strategy is Strategy.FSDP:
        found += _fsdp_differences(args, plan)
        recompute = recompute or bool((args.fsdp_config or {}).get("activation_checkpointing"))
    found += _checkpointing_difference(
        args, strategy is Strategy.FSDP, recompute, plan.config.activation_checkpointing, model
    )
    return found


def _checkpointing_difference(
    args: Any, fsdp: bool, trainer_recomputes: bool, planned: ActivationCheckpointing, model: Any
) -> list[str]:
    """The Trainer's and accelerate's checkpointing recomputes whole blocks (full); selective and op-level
    checkpointing run only through our backends' wrapper on the model (backends/parts/activation_checkpointing.py),
    with the Trainer's own turned off: the phrase then says which of the two steps is missing."""
    from backends.parts.activation_checkpointing import applied_mode, transformers_checkpointing_on

    on_model = applied_mode(model) if model is not None else "none"  # ours, or transformers' own (full)
    running = "full" if trainer_recomputes else on_model
    if running == planned.value:
        return []
    if planned not in (ActivationCheckpointing.SELECTIVE, ActivationCheckpointing.OP):
        return [f"activation checkpointing {running} (plan {planned.value})"]
    steps = []
    if model is not None and transformers_checkpointing_on(model):
        steps.append("drop gradient_checkpointing_enable() on the model")
    if on_model != planned.value:
        steps.append(
            f'apply activation_checkpointing.apply(model, "{planned.value}") (from backends import activation_checkpointing)'
        )
    if trainer_recomputes:
        if fsdp:
            steps.append('turn the Trainer\'s off: fsdp_config["activation_checkpointing"] = False')
        else:  # transformers 5 renamed gradient_checkpointing to activation_checkpointing
            name = "activation_checkpointing" if hasattr(args, "activation_checkpointing") else "gradient_checkpointing"
            steps.append(f"turn the Trainer's off: {name}=False")
    return [f"activation checkpointing {running} (plan {planned.value}, {OURS_ONLY}): {' and '.join(steps)}"]


def _deepspeed_config(args: Any) -> dict | None:
    holder = getattr(args, "hf_deepspeed_config", None)
    if holder is not None and isinstance(getattr(holder, "config", None), dict):
        return holder.config
    value = getattr(args, "deepspeed", None)
    if isinstance(value, dict):
        return value
    if isinstance(value, (str, Path)) and Path(value).is_file():
        return json.loads(Path(value).read_text(encoding="utf-8"))
    return None


def _fsdp_differences(args: Any, plan: Plan) -> list[str]:
    raw = args.fsdp  # transformers 5 keeps `fsdp=True` as given; older ones a list of FSDPOption
    if isinstance(raw, str):
        options = set(raw.split())
    elif isinstance(raw, (list, tuple)):
        options = {str(getattr(option, "value", option)) for option in raw}
    else:
        options = set()
    config = args.fsdp_config or {}
    reshard = config.get("reshard_after_forward")
    if "shard_grad_op" in options or reshard is False:
        sharding = FsdpSharding.GRAD_OP
    elif "hybrid_shard" in options or reshard == "hybrid_shard":
        sharding = FsdpSharding.HYBRID
    elif "no_shard" in options or reshard == "no_shard":
        sharding = FsdpSharding.NONE
    else:
        sharding = FsdpSharding.FULL
    found = []
    if sharding is not plan.config.fsdp_sharding:
        found.append(f"FSDP sharding {sharding.value} (plan {plan.config.fsdp_sharding.value})")
    offloaded = "offload" in options or bool(config.get("cpu_offload") or config.get("offload_params"))
    planned = Offload.CPU in (plan.config.offload_params, plan.config.offload_optimizer)
    if offloaded != planned:
        found.append(f"FSDP CPU offload {'on' if offloaded else 'off'} (plan {'on' if planned else 'off'})")
    return found
