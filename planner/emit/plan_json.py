"""plan.json: the whole Plan (schema-versioned), the run it was emitted for, and where each estimate came from.

The top level is `Plan.model_dump()`, so `Plan.model_validate_json` reads the
file back (extra keys are ignored); "run" is the RunTarget the other files
were written from, which the training script reads.
"""

from __future__ import annotations

import json
from typing import Any

from ..plan import Plan
from .target import RunTarget

PLAN_FILE_SCHEMA_VERSION = 1


def plan_document(plan: Plan, target: RunTarget) -> dict[str, Any]:
    document = plan.model_dump(mode="json")
    document["plan_file_schema_version"] = PLAN_FILE_SCHEMA_VERSION
    document["run"] = target.model_dump(mode="json")
    document["estimate_sources"] = {
        "memory": plan.memory.sources,
        "throughput": plan.throughput.sources if plan.throughput else {},
        "calibration": plan.calibration,
        "cluster_assumptions": plan.cluster.assumptions,
    }
    return document


def plan_json(plan: Plan, target: RunTarget) -> str:
    return json.dumps(plan_document(plan, target), indent=2, sort_keys=False) + "\n"


def read_plan_file(text: str) -> tuple[Plan, RunTarget]:
    """Parse a plan.json written by plan_json."""
    document = json.loads(text)
    return Plan.model_validate(document), RunTarget.model_validate(document["run"])
