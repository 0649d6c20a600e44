"""The winner of `tune RUN_DIR` on a folder emitted with `plan --elastic MIN:MAX`: the folder stays elastic.

The winner gets its own fallback table over the folder's node range (planner/search/elastic.py). A measured
plan whose family has no layout on one of those counts (a global batch that does not split over its
data-parallel ranks there, say) cannot keep the range: the fastest measured plan that can wins, and a line
says which faster one was passed over and why. When none can, the folder is left as it was, in one line that
names the folder's range (the user gave `tune RUN_DIR`, not --elastic) and what to do.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import UserInputError

if TYPE_CHECKING:
    from planner.elastic_plan import ElasticPlan
    from planner.hardware.cluster import ClusterSpec
    from planner.models.spec import ModelSpec
    from planner.plan import Plan
    from planner.search import PlanRequest


@dataclass(frozen=True)
class ElasticRange:
    """A folder's elastic range, and the fallback table of any plan over it."""

    run_dir: Path
    spec: ModelSpec
    request: PlanRequest
    node_range: tuple[int, int]
    restarts: int
    # Each node count's calibration (calibration_hook.py's cluster_calibration, with the tune's --db and
    # --no-calibration): the fallbacks are calibrated as the ranking is, by the records the trials have just added
    # (None: the formula's).
    calibrate: Callable[[ClusterSpec], Any] | None = None

    def table(self, plan: Plan) -> ElasticPlan:
        from planner.search.elastic import elastic_plan

        return elastic_plan(
            self.spec, self.request, plan, self.node_range, calibrate=self.calibrate, max_restarts=self.restarts
        )


def elastic_range(run_dir: Path, spec: ModelSpec, request: PlanRequest) -> ElasticRange | None:
    """The range of a folder emitted with --elastic (None: not elastic)."""
    from planner.rundir.replan import read_elastic

    block = read_elastic(run_dir)
    if block is None:
        return None
    # The range asked for: the tuned winner may fit counts the plan did not.
    return ElasticRange(run_dir, spec, request, block.requested_range, block.max_restarts)


def elastic_winner(ranked: list[Any], plan_of: Callable[[Any], Plan], folder: ElasticRange):
    """(trial, its plan, its fallback table) of the fastest measured trial (`ranked`: the measured ones, fastest
    first) whose plan keeps the folder's range; one line on stderr for each faster one passed over."""
    from planner.search.elastic import RangeFitsNoPlan

    low, high = folder.node_range
    passed: list[tuple[Any, RangeFitsNoPlan]] = []
    for trial in ranked:
        plan = plan_of(trial)
        try:
            table = folder.table(plan)
        except RangeFitsNoPlan as unfit:
            passed.append((trial, unfit))
            continue
        for faster, unfit in passed:
            print(
                f"tune: {faster.label} measured faster, but {folder.run_dir} is elastic over {low}:{high} nodes and "
                f"{unfit.nodes} nodes fit no plan of its family ({unfit.why_not}); the winner is {trial.label}",
                file=sys.stderr,
            )
        return trial, plan, table
    fastest, unfit = passed[0]
    raise UserInputError(
        f"{folder.run_dir} is elastic over {low}:{high} nodes, and no measured plan keeps that range "
        f"({fastest.label}: {unfit.nodes} nodes fit no plan, {unfit.why_not}); the folder is left as it was: "
        "train it as it is, or tune more families (--candidates, --strategies)"
    )
