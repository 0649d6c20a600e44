"""Read a run folder's plan.json: the Plan and its RunConfig, every way it can be wrong as one line.

planner/emit/plan_json.py writes the file; the runner, `hardware-selector
train` and the benchmark harness read it only through here. An older or
newer schema, a file that is not a plan, or a value out of range is a
UserInputError that says how to re-emit.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from planner.contract.run_config import RunConfig
from planner.contract.schema import check_schema_version, describe_validation_error, read_json_file
from planner.errors import UserInputError
from planner.plan import Plan

EMIT_HINT = "emit a run folder with `hardware-selector plan ... --emit DIR`"


def read_plan_file(path: str | Path) -> tuple[Plan, RunConfig]:
    """The Plan and RunConfig of a plan.json (or of the run folder holding one)."""
    path = Path(path)
    if not path.exists():  # the folder named, not its parent (a new user's audit: "/tmp has no plan.json")
        raise UserInputError(f"{path}: no such run folder or plan.json; {EMIT_HINT}")
    if path.is_dir():
        path = path / "plan.json"
    if not path.exists():
        raise UserInputError(f"{path.parent} has no plan.json; {EMIT_HINT}")
    document = read_json_file(path, EMIT_HINT)
    if not isinstance(document, dict) or "run" not in document or "model" not in document:
        raise UserInputError(f"{path} is not a plan.json written by `hardware-selector plan --emit`; {EMIT_HINT}")
    check_schema_version(document.get("schema_version"), str(path))
    run = document["run"]
    check_schema_version(run.get("schema_version") if isinstance(run, dict) else None, f"{path} (run block)")
    try:
        plan = Plan.model_validate(document)
        if "layout" not in run:  # the plan's own layout (plan_json stores it once)
            run = {**run, "layout": plan.layout.model_dump(mode="json")}
        run_config = RunConfig.model_validate(run)
    except ValidationError as error:
        raise UserInputError(
            f"{path}: {describe_validation_error(error, 'docs/running.md')}; fix the value or re-emit the folder"
        ) from None
    check_batch_agrees(path, plan, run_config)
    return plan, run_config


def check_batch_agrees(path: Path, plan: Plan, run: RunConfig) -> None:
    """One batch number edited by hand (a micro-batch, an accumulation) leaves the others saying another global
    batch: refused, naming them all, rather than training a batch the plan was not made for."""
    config, planned = plan.config, plan.global_batch
    plans = (
        f"the plan's config gives micro_batch {config.micro_batch} x grad_accum {config.grad_accum} x data-parallel "
        f"{plan.layout.data_parallel} = {planned}"
    )
    fix = "make them agree, or re-emit the folder"
    if plan.throughput is not None and plan.throughput.global_batch != planned:
        raise UserInputError(f"{path}: throughput.global_batch is {plan.throughput.global_batch}, but {plans}; {fix}")
    if not run.nproc_overridden and run.global_batch != planned:  # an override of the process count re-splits it
        raise UserInputError(
            f"{path}: the run block's micro_batch {run.micro_batch} x grad_accum {run.grad_accum} x data-parallel "
            f"{run.layout.data_parallel} = {run.global_batch} sequences per step, but {plans}; {fix}"
        )


def plan_and_run(source: Plan | str | Path) -> tuple[Plan, RunConfig]:
    """What every API that takes a plan accepts: a Plan, a plan.json, or the run folder holding one.

    A folder's plan.json carries the run it was emitted with (data, weights, hyperparameters); a Plan
    object gets the plan's own run."""
    if isinstance(source, Plan):
        from planner.rundir.run_options import run_config  # the one place a Plan's RunConfig is computed

        return source, run_config(source)
    if isinstance(source, (str, Path)):
        return read_plan_file(source)
    nothing = " (an answer where nothing fit has no plan: see its suggestions)" if source is None else ""
    raise UserInputError(
        f"a plan is a Plan, a plan.json path or a run folder, not {type(source).__name__}{nothing}; "
        "get one from HardwareSelector / `hardware-selector plan --emit DIR`"
    )
