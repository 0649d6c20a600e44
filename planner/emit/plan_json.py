"""plan.json: the whole Plan, the run it was emitted for (its RunConfig), and where each estimate came from.

The top level is `Plan.model_dump()`, so `Plan.model_validate` reads the file
back; "run" is the RunConfig every other file of the folder was written from,
which the runner reads; "elastic" holds an elastic run's fallback layouts. Both carry the one SCHEMA_VERSION of the contract.
The layout is stored once, as the config's ParallelDims split (dp is what the
cluster leaves); the run block repeats it only when the run's process counts
differ from the plan's.
planner/rundir/plan_file.py reads it back.
"""

from __future__ import annotations

import json
from typing import Any

from planner.contract.run_config import RunConfig
from planner.elastic_plan import ElasticPlan
from planner.plan import Plan
from planner.throughput.to_train import run_to_train


def plan_document(
    plan: Plan, run: RunConfig, tune: dict[str, Any] | None = None, elastic: ElasticPlan | None = None
) -> dict[str, Any]:
    document = plan.model_dump(mode="json")
    document["run"] = run.model_dump(mode="json")
    if run.layout == plan.layout:
        # Stored once: the config's split, placed on the plan's cluster. A run on other process counts
        # (emitted with --nproc) keeps its own layout here.
        del document["run"]["layout"]
    document["estimate_sources"] = {
        "memory": plan.memory.sources,
        "throughput": plan.throughput.sources if plan.throughput else {},
        "calibration": plan.calibration,
        "cluster_assumptions": plan.cluster.assumptions,
    }
    # The run's own --steps costed as `plan --emit --steps --json` costs it (None for a run sized in epochs).
    document["to_train"] = run_to_train(plan, run)
    if tune is not None:  # the trials a `tune` measured, and which won (Plan.model_validate ignores the key)
        document["tune"] = tune
    if elastic is not None:  # the node range and each count's fallback (planner/elastic_plan.py)
        document["elastic"] = elastic.model_dump(mode="json")
    return document


def plan_json(
    plan: Plan, run: RunConfig, tune: dict[str, Any] | None = None, elastic: ElasticPlan | None = None
) -> str:
    return json.dumps(plan_document(plan, run, tune, elastic), indent=2, sort_keys=False) + "\n"
