"""`training_arguments(plan, output_dir, **overrides)`: a transformers.TrainingArguments that trains a plan.

The keywords are training_args.json's (planner/emit/training_args.py), with the Trainer flavour of the run's
DeepSpeed config; transformers is imported only here, when it is called.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.contract.run_config import RunConfig
from planner.emit.deepspeed_json import deepspeed_config
from planner.emit.training_args import training_args_kwargs
from planner.errors import UnknownKeywordError, UserInputError, UserInputTypeError
from planner.limits import MAX_GPUS_PER_NODE, check_count
from planner.plan import Plan
from planner.rundir.engine_for_run import engine_config_for_run
from planner.rundir.plan_file import plan_and_run
from planner.rundir.run_options import run_config

# What a CPU plan's FSDP or DeepSpeed needs before its TrainingArguments: accelerate's state for CPU processes over
# gloo (backends/cpu_distributed.py), which planner/ does not import. `hardware_selector` installs it, so its
# function and HardwareSelector.training_arguments set it up alike (a long-time user's audit found the method
# without it). It returns whether it set the state up (only in a launched process).
_cpu_state_setup: list[Callable[[str], bool]] = []


def install_cpu_state_setup(setup: Callable[[str], bool]) -> None:
    """Make `setup(strategy)` what a CPU plan's FSDP or DeepSpeed TrainingArguments run first."""
    _cpu_state_setup[:] = [setup]


def training_arguments(
    plan: Plan | str | Path,
    output_dir: str | Path,
    *,
    nproc_override: int | None = None,
    run: RunConfig | None = None,
    **overrides: Any,
):
    """A transformers.TrainingArguments that trains `plan` (a Plan, a plan.json or a run folder) as `run`
    (default: the folder's run, or the plan's own); keyword overrides win over the plan's values."""
    from transformers import TrainingArguments

    _check_call(output_dir, nproc_override, run)
    if isinstance(plan, Plan):
        target = run or run_config(plan, nproc_override)
    else:
        plan, stored = plan_and_run(plan)
        target = run or (stored if nproc_override is None else run_config(plan, nproc_override))
    strategy = plan.config.strategy.value
    cpu_sharded = target.device == "cpu" and strategy in ("fsdp", "deepspeed")
    if cpu_sharded and "accelerator_config" not in overrides and any(setup(strategy) for setup in _cpu_state_setup):
        overrides["accelerator_config"] = {"use_configured_state": True}
    trainer_deepspeed = deepspeed_config(plan, engine_config_for_run(plan, target), trainer_flavour=True)
    kwargs = training_args_kwargs(plan, target, str(output_dir), deepspeed=trainer_deepspeed)
    if kwargs is None:
        raise UserInputError(
            "tensor/pipeline-parallel plans run on our engine, not the HF Trainer; "
            "use `hardware-selector train DIR` or `python -m backends.run --plan DIR`"
        )
    for names in RENAMED_FIELDS:  # an override under either name replaces the plan's value under the other
        if any(name in overrides for name in names):
            for name in names:
                kwargs.pop(name, None)
    kwargs.update(checked_overrides(overrides, TrainingArguments))
    try:
        return TrainingArguments(**kwargs)
    except (ValueError, TypeError) as error:  # transformers' own checks (logging_steps=0, bf16 on a CPU, ...)
        raise _refusal(error, plan, kwargs, overrides) from None


def _refusal(error: Exception, plan: Plan, kwargs: dict[str, Any], overrides: dict[str, Any]) -> UserInputError:
    """transformers' refusal in one line that blames what caused it: a GPU plan's bf16/fp16 on a machine without
    CUDA is the plan's (or an override's) precision, not "the overrides" when none were passed."""
    import torch

    half = "bf16" if kwargs.get("bf16") else "fp16" if kwargs.get("fp16") else None
    if half and not kwargs.get("use_cpu") and not torch.cuda.is_available():
        given = (
            f"{half}=True (your override)" if half in overrides else f"this plan is {half} on {plan.cluster.gpu.name}"
        )
        return UserInputError(
            f"{given} and this machine has no CUDA: pass use_cpu=True for a trial run on the CPU, "
            "or plan again for the CPU (`plan --gpu cpu`, gpu='cpu' in the Python API)"
        )
    why = " ".join(str(error).split())
    whose = "the overrides" if overrides else "the plan's arguments"
    return UserInputError(f"transformers.TrainingArguments refused {whose}: {why}")


def _check_call(output_dir: object, nproc_override: object, run: object) -> None:
    """The arguments besides the overrides, each refused by name in one sentence."""
    if not isinstance(output_dir, (str, Path)) or not str(output_dir).strip():
        raise UserInputError(f"output_dir must be the path of a folder for the Trainer's output, not {output_dir!r}")
    if nproc_override is not None:
        if not isinstance(nproc_override, int) or isinstance(nproc_override, bool):
            raise UserInputTypeError(f"nproc_override must be an int (processes per node), not {nproc_override!r}")
        check_count("nproc_override", nproc_override, high=MAX_GPUS_PER_NODE)
    if run is not None and not isinstance(run, RunConfig):
        raise UserInputTypeError(
            f"run must be a RunConfig (planner.contract.run_config), not {type(run).__name__}; omit it for the "
            "plan's own run"
        )


# transformers 5 renamed these and, given both names, takes the new one: the plan sets the name its transformers
# reads (planner/emit/training_args.py), so `gradient_checkpointing=True` beside the plan's
# `activation_checkpointing=False` was dropped without a word.
RENAMED_FIELDS = (
    ("gradient_checkpointing", "activation_checkpointing"),
    ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"),
)

# Ranges of the overrides whose wrong values transformers takes silently (a batch of -1, a NaN learning rate).
OVERRIDE_RANGES: dict[str, tuple[float, float]] = {
    "per_device_train_batch_size": (1, 1 << 20),
    "per_device_eval_batch_size": (1, 1 << 20),
    "gradient_accumulation_steps": (1, 1 << 20),
    "learning_rate": (1e-12, 10.0),
    "num_train_epochs": (1e-9, 1e6),
    "max_steps": (-1, 1 << 40),  # -1: transformers' "as many as num_train_epochs gives"
    "warmup_steps": (0, 1 << 40),
    "weight_decay": (0.0, 10.0),
    "max_grad_norm": (0.0, 1e6),
}


def _shown(bound: float) -> str:
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"


def checked_overrides(overrides: dict[str, Any], arguments: type) -> dict[str, Any]:
    """The keyword overrides, each a TrainingArguments field with a value of its kind in range; one
    UserInputError naming the first that is not."""
    import dataclasses
    import math

    fields = {field.name: field for field in dataclasses.fields(arguments)}
    for name, value in overrides.items():
        if name not in fields:
            listed = "its other keywords are transformers.TrainingArguments' fields"
            raise UnknownKeywordError("training_arguments", name, sorted(fields), listed)
        default = fields[name].default
        if isinstance(default, bool) and not isinstance(value, bool):  # "no" would be true
            raise UserInputTypeError(f"{name} must be True or False, not {type(value).__name__} {value!r}")
        if not isinstance(default, (int, float)) or isinstance(default, bool) or value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserInputTypeError(f"{name} must be a number, not {type(value).__name__} {value!r}")
        if isinstance(default, int) and not isinstance(value, int):
            raise UserInputTypeError(f"{name} must be a whole number, not {value!r}")
        # A count or length whose default is not negative (save_steps, seed) takes no negative value either.
        low, high = OVERRIDE_RANGES.get(name, (-math.inf if default < 0 else 0, math.inf))
        if not math.isfinite(value) or not low <= value <= high:
            bounds = f"from {_shown(low)} to {_shown(high)}" if math.isfinite(high) else f"of at least {_shown(low)}"
            raise UserInputError(f"{name} must be a finite number {bounds}, not {value!r}")
    return overrides
