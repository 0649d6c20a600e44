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
    kwargs.update(overrides)
    return TrainingArguments(**kwargs)
