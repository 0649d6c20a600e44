"""`training_arguments(plan, output_dir, **overrides)`: a transformers.TrainingArguments that trains a plan.

The keywords are training_args.json's (planner/emit/training_args.py), with the Trainer flavour of the run's
DeepSpeed config; transformers is imported only here, when it is called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.contract.run_config import RunConfig
from planner.emit.deepspeed_json import deepspeed_config
from planner.emit.training_args import training_args_kwargs
from planner.errors import UserInputError
from planner.plan import Plan
from planner.rundir.engine_for_run import engine_config_for_run
from planner.rundir.plan_file import plan_and_run
from planner.rundir.run_options import run_config


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

    if isinstance(plan, Plan):
        target = run or run_config(plan, nproc_override)
    else:
        plan, stored = plan_and_run(plan)
        target = run or (stored if nproc_override is None else run_config(plan, nproc_override))
    trainer_deepspeed = deepspeed_config(plan, engine_config_for_run(plan, target), trainer_flavour=True)
    kwargs = training_args_kwargs(plan, target, str(output_dir), deepspeed=trainer_deepspeed)
    if kwargs is None:
        raise UserInputError(
            "tensor/pipeline-parallel plans run on our engine, not the HF Trainer; "
            "use `hardware-selector train DIR` or `python -m backends.run --plan DIR`"
        )
    kwargs.update(checked_overrides(overrides, TrainingArguments))
    return TrainingArguments(**kwargs)


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
            raise UserInputError(f"{name} is not a TrainingArguments argument; see transformers' TrainingArguments")
        default = fields[name].default
        numeric = isinstance(default, (int, float)) and not isinstance(default, bool)
        if not numeric or value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserInputError(f"{name} must be a number, not {type(value).__name__} {value!r}")
        if isinstance(default, int) and not isinstance(value, int):
            raise UserInputError(f"{name} must be a whole number, not {value!r}")
        low, high = OVERRIDE_RANGES.get(name, (-math.inf, math.inf))
        if not math.isfinite(value) or not low <= value <= high:
            raise UserInputError(f"{name} must be a finite number from {_shown(low)} to {_shown(high)}, not {value!r}")
    return overrides
