"""Re-planning an elastic run for the processes it was restarted with (docs/running.md, "Elastic").

An elastic run folder's plan.json holds a fallback for every node count of its range (planner/elastic_plan.py).
When the runner starts on another world size, `plan_for_world` takes that count's fallback: a plan of the same
model, global batch, precision and optimizer, in a strategy the checkpoint reshards to. A world size outside the
range, or one on which nothing fits, is one line that names the sizes that work; it is raised before anything is
built or written, so the checkpoint stays as it was.

`Replan` is what the runner says and records when the layout changed: the console line, a metrics.jsonl row and
an entry of plan.json's "history" (`append_history`).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from planner.contract.run_config import RunConfig
from planner.contract.schema import describe_validation_error, read_json_file
from planner.elastic_plan import ElasticPlan
from planner.errors import UserInputError
from planner.files import write_text_atomic
from planner.plan import Plan
from planner.rundir.run_options import predicted
from planner.training_config import FsdpSharding, Strategy
from planner.units import counted

HISTORY_KEY = "history"


def read_elastic(run_dir: Path) -> ElasticPlan | None:
    """plan.json's "elastic" block, or None for a folder emitted without --elastic."""
    document = read_json_file(run_dir / "plan.json", "re-emit the run folder")
    block = document.get("elastic") if isinstance(document, dict) else None
    if block is None:
        return None
    try:
        return ElasticPlan.model_validate(block)
    except ValidationError as error:
        raise UserInputError(
            f"{run_dir / 'plan.json'}: elastic block: {describe_validation_error(error, 'docs/running.md')}; "
            "re-emit the folder with --elastic"
        ) from None


def layout_summary(plan: Plan) -> str:
    """How a plan splits the run, in a few words: "engine ZeRO-3 dp4", "FSDP full dp2", "engine ZeRO-1 dp2 tp2"."""
    config = plan.config
    if config.strategy is Strategy.FSDP:
        name = f"FSDP {'full' if config.fsdp_sharding is FsdpSharding.FULL else config.fsdp_sharding.value}"
    elif config.strategy in (Strategy.ENGINE, Strategy.DEEPSPEED):
        name = f"{config.strategy.display_name} ZeRO-{config.zero_stage}"
    else:
        name = config.strategy.display_name
    layout = plan.layout
    degrees = [f"dp{layout.data_parallel}"]
    degrees += [f"{axis}{degree}" for axis, degree in (("tp", layout.tp), ("pp", layout.pp), ("cp", layout.cp),
                                                       ("ep", layout.ep)) if degree > 1]  # fmt: skip
    return f"{name} {' '.join(degrees)}"


def plan_for_world(
    plan: Plan, run: RunConfig, elastic: ElasticPlan, world: int, local_world: int
) -> tuple[Plan, RunConfig]:
    """The plan and run for `world` processes (`local_world` per node): the plan's own on its world size, the
    fallback of the elastic table otherwise; one line when the table has none that fits."""
    if world == run.world_size:
        return plan, run
    fallback = elastic.fallback_for(world)
    sizes = elastic.fitting_world_sizes
    fitting = ", ".join(str(size) for size in sizes) or "none"
    if fallback is None:
        raise UserInputError(
            f"{counted(world, 'process', 'processes')}: this run is elastic over {elastic.min_nodes} to {elastic.max_nodes} nodes of "
            f"{elastic.gpus_per_node} (world sizes that fit: {fitting}); start one of those, or re-emit with a "
            "wider --elastic (the checkpoint is kept as it was)"
        )
    if not fallback.fits:
        either = " or ".join(filter(None, [", ".join(str(size) for size in sizes[:-1]), fitting.split(", ")[-1]]))
        raise UserInputError(
            f"{counted(world, 'process', 'processes')} cannot hold this run: {fallback.why_not}; start {either} "
            f"process{'' if sizes == [1] else 'es'} (the checkpoint is kept as it was)"
        )
    replanned = fallback.plan(plan)
    nodes = max(1, world // max(1, local_world))
    fields = {
        "layout": replanned.layout,
        "micro_batch": replanned.config.micro_batch,
        "grad_accum": replanned.config.grad_accum,
        "nproc_per_node": world // nodes,
        "num_nodes": nodes,
        "predicted": predicted(replanned),
    }
    try:
        return replanned, RunConfig.model_validate({**run.model_dump(), **fields})
    except ValidationError as error:
        raise UserInputError(
            f"re-planning for {counted(world, 'process', 'processes')}: {describe_validation_error(error, 'docs/running.md')}"
        ) from None


class Replan(BaseModel):
    """A change of layout between the run's last start (or its plan) and this one."""

    model_config = ConfigDict(frozen=True)

    at_step: int
    from_world: int
    to_world: int
    from_layout: str
    to_layout: str
    from_micro_batch: int
    to_micro_batch: int
    from_grad_accum: int
    to_grad_accum: int
    predicted_step_s: float | None = None
    prediction_source: str = ""

    def line(self) -> str:
        speed = ""
        if self.predicted_step_s:
            # The source's first word ("formula", "measured"); the whole of it is in the history entry.
            kind = self.prediction_source.split(":")[0] or "throughput model"
            speed = f", predicted {self.predicted_step_s:.3g} s/step ({kind})"
        return (
            f"re-planned: {self.from_world} → {self.to_world} ranks, {self.from_layout} → {self.to_layout}, "
            f"micro-batch x accumulation {self.from_micro_batch} x {self.from_grad_accum} → "
            f"{self.to_micro_batch} x {self.to_grad_accum}{speed}"
        )


def replan_since(
    before: dict | None, plan: Plan, run: RunConfig, *, original: Plan, original_run: RunConfig, at_step: int
) -> Replan | None:
    """The Replan from what the checkpoint was saved under (`before`, the runner's saved_under), or from the
    folder's own plan on a fresh start, to this run; None when the world size did not change."""
    if before is not None and before.get("world_size"):
        from_world, from_layout = int(before["world_size"]), str(before.get("plan_layout", before.get("layout", "")))
        from_micro, from_accum = int(before.get("micro_batch", 0)), int(before.get("grad_accum", 0))
    else:
        from_world, from_layout = original_run.world_size, layout_summary(original)
        from_micro, from_accum = original_run.micro_batch, original_run.grad_accum
    if from_world == run.world_size:
        return None
    return Replan(
        at_step=at_step,
        from_world=from_world,
        to_world=run.world_size,
        from_layout=from_layout,
        to_layout=layout_summary(plan),
        from_micro_batch=from_micro,
        to_micro_batch=run.micro_batch,
        from_grad_accum=from_accum,
        to_grad_accum=run.grad_accum,
        predicted_step_s=run.predicted.step_time_s,
        prediction_source=run.predicted.throughput_source,
    )


def append_history(run_dir: Path, replan: Replan) -> None:
    """Add `replan` to plan.json's "history" (atomically); the plan and its elastic table stay as emitted."""
    path = run_dir / "plan.json"
    document = read_json_file(path, "re-emit the run folder")
    entry = {**replan.model_dump(mode="json"), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    document[HISTORY_KEY] = [*document.get(HISTORY_KEY, []), entry]
    write_text_atomic(path, json.dumps(document, indent=2) + "\n")


def plan_digest(run_dir: Path) -> str:
    """A short hash of plan.json as emitted (its history left out, so re-planning does not change it)."""
    document = read_json_file(run_dir / "plan.json", "re-emit the run folder")
    if isinstance(document, dict):
        document = {key: value for key, value in document.items() if key != HISTORY_KEY}
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]
