"""An elastic run restarted on another number of processes: take that world size's plan, and say so.

torchrun (`--nnodes MIN:MAX --max-restarts N`, as launch.sh and slurm.sbatch start an elastic folder) restarts
the workers when a node is lost or returns. Each rank then starts here with the new world size:
`fit_elastic` swaps in the plan.json fallback for it (planner/rundir/replan.py) before anything is built, so the
adapter, the data stream and the checkpoint load all see the new layout. The checkpoint reshards on load
(the engine's backends/checkpoint/reshard.py, DCP for FSDP and DDP), the data stream continues at the same global
sample (backends/data/stream.py), and the global batch is the plan's. `announce_replan` prints the change, writes
a "replan" row to metrics.jsonl and adds it to plan.json's history (docs/running.md, "Elastic").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from planner.contract.run_config import RunConfig
from planner.plan import Plan
from planner.rundir.engine_for_run import engine_config_for_run
from planner.rundir.replan import append_history, layout_summary, plan_for_world, replan_since

if TYPE_CHECKING:
    from backends.runner.folder import RunSpec


@dataclass(frozen=True)
class ElasticStart:
    """The folder's own plan and run, which a re-plan is measured from on a fresh start."""

    plan: Plan
    run: RunConfig


def fit_elastic(
    spec: RunSpec, run: RunConfig, world: int, local_world: int
) -> tuple[RunSpec, RunConfig, ElasticStart | None]:
    """(spec, run) for `world` processes, and the ElasticStart of an elastic folder (None otherwise)."""
    if spec.elastic is None:
        return spec, run, None
    start = ElasticStart(plan=spec.plan, run=run)
    plan, fitted = plan_for_world(spec.plan, run, spec.elastic, world, local_world)
    if plan is spec.plan:
        return spec, run, start
    engine_file = spec.engine_file
    if engine_file is not None:  # the user's engine.json edits carry over; the ZeRO stage, offload and layout are
        derived = engine_config_for_run(plan, fitted)  # the re-plan's
        zero = engine_file.zero_optimization.model_copy(
            update={
                "stage": derived.zero_optimization.stage,
                "offload_optimizer": derived.zero_optimization.offload_optimizer,
                "overlap_comm": derived.zero_optimization.overlap_comm,
            }
        )
        # The layout is the re-plan's; so is every setting of the block the user left as the first plan had it
        # (activation checkpointing a smaller world needs to fit, kernels): a review found them kept.
        ours, first = derived.hardware_selector, engine_config_for_run(spec.plan, run).hardware_selector
        theirs = engine_file.hardware_selector
        kept = {"layout", "pipeline_schedule", "sequence_parallel"} | {
            key for key in type(ours).model_fields if getattr(theirs, key) == getattr(first, key)
        }
        selector = theirs.model_copy(update={key: getattr(ours, key) for key in kept})
        engine_file = engine_file.model_copy(update={"zero_optimization": zero, "hardware_selector": selector})
    return replace(spec, plan=plan, run=fitted, engine_file=engine_file), fitted, start


def saved_layout(spec: RunSpec, run: RunConfig) -> dict[str, Any]:
    """What a checkpoint records of the layout it was saved under, for the next start's re-plan line."""
    return {
        "world_size": run.world_size,
        "plan_layout": layout_summary(spec.plan),
        "micro_batch": run.micro_batch,
        "grad_accum": run.grad_accum,
    }


def announce_replan(session: Any, saved_under: dict | None) -> None:
    """When the world size changed since the checkpoint (or the plan, on a fresh start): the re-plan line among
    the notes of `session` (a backends.runner.loop.RunSession, which imports this module), a metrics row, and (rank 0) an entry of plan.json's history."""
    start, spec, run, step = session.elastic, session.spec, session.run, session.step
    if start is None:
        return
    replan = replan_since(saved_under, spec.plan, run, original=start.plan, original_run=start.run, at_step=step)
    if replan is None:
        return
    session.metrics.write("replan", {"step": step, **replan.model_dump(mode="json")})
    if session.rank == 0:
        append_history(spec.run_dir, replan)
    session.notes.append(replan.line())
