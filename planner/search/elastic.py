"""elastic_plan: the plan's fallback for every node count of an elastic range (docs/running.md, "Elastic").

One search per node count, on the same GPUs per node, with the request that made the plan narrowed to what a
resumed run can keep: the plan's global batch, precision and optimizer, and the strategies its checkpoint
reshards to (planner/elastic_plan.py, RESHARDABLE). A fallback uses every GPU of its node count, because the
processes torchrun restarts are all the GPUs that remain. tests/test_elastic.py checks the table against the
search run by hand on each count.
"""

from __future__ import annotations

from collections.abc import Callable

from planner.elastic_plan import ElasticPlan, Fallback, reshardable_strategies
from planner.errors import UserInputError
from planner.hardware.cluster import ClusterSpec
from planner.models.spec import ModelSpec
from planner.plan import Plan
from planner.search.candidates import ThroughputAdjust
from planner.search.request import PlanRequest
from planner.search.search import search_plans

# A node count's calibration: the search's hook and line for that cluster (hardware_selector_cli/calibration_hook.py
# gives them from the benchmark database, as for the plan itself).
Calibrate = Callable[[ClusterSpec], tuple[ThroughputAdjust | None, str | None]]


def fallback_request(plan: Plan, request: PlanRequest) -> PlanRequest:
    """The request each node count is searched with: the plan's batch, precision and optimizer kept."""
    config = plan.config
    return request.model_copy(
        update={
            "global_batch": plan.global_batch,
            "precision": config.precision,
            "optimizer": config.optimizer,
            "strategies": reshardable_strategies(config.strategy),
            "top_k": 8,
        }
    )


class RangeFitsNoPlan(UserInputError):
    """The range's largest node count fits no plan of the plan's family: `plan --elastic` refuses it in one line
    naming the flag; the attributes let another caller (`tune RUN_DIR` of an elastic folder) say it its own way."""

    def __init__(self, node_range: tuple[int, int], top: Fallback, most: int) -> None:
        self.node_range, self.nodes, self.why_not, self.most = node_range, top.num_nodes, top.why_not, most
        instead = f"use --elastic {node_range[0]}:{most}" if most > node_range[0] else "drop --elastic"
        super().__init__(
            f"--elastic {node_range[0]}:{node_range[1]}: {top.num_nodes} nodes fit no plan ({top.why_not}); "
            f"the largest count that fits is {most} node{'s' if most != 1 else ''}: {instead}"
        )


def fitting_range(fallbacks: list[Fallback], node_range: tuple[int, int]) -> tuple[int, int]:
    """The node range torchrun is given: MIN raised to the smallest count that fits a plan (torchrun would
    otherwise start on fewer nodes, stop at once and spend its restarts); one line when MAX fits nothing."""
    top = fallbacks[-1]
    if not top.fits:
        fitting = [entry.num_nodes for entry in fallbacks if entry.fits]
        raise RangeFitsNoPlan(node_range, top, fitting[-1])
    low = next(entry.num_nodes for entry in fallbacks if entry.fits)
    return low, node_range[1]


def elastic_plan(
    spec: ModelSpec,
    request: PlanRequest,
    plan: Plan,
    node_range: tuple[int, int],
    throughput_adjust: ThroughputAdjust | None = None,
    *,
    calibration: str | None = None,
    calibrate: Calibrate | None = None,
    max_restarts: int = 3,
) -> ElasticPlan:
    """The fallbacks of `plan` for every node count in `node_range`, on its cluster's GPUs and links; the plan's
    own count keeps the plan itself. The table keeps every count asked for (those below the range say why nothing
    fits there); its range starts at the smallest count that fits (fitting_range). Each count's search is
    calibrated by `calibrate(its cluster)` when given (a record of that very cluster replaces its step, as for the
    plan), else by `throughput_adjust` and `calibration` (the plan's own: its family's corrections only)."""
    narrowed = fallback_request(plan, request)
    fallbacks = []
    for nodes in range(node_range[0], node_range[1] + 1):
        if nodes == plan.cluster.num_nodes:
            fallbacks.append(Fallback.of(plan))
            continue
        on_nodes = plan.cluster.with_nodes(nodes)
        adjust, line = calibrate(on_nodes) if calibrate is not None else (throughput_adjust, calibration)
        result = search_plans(spec, on_nodes, narrowed, adjust, calibration=line, suggest=False)
        whole = [candidate for candidate in result.candidates if candidate.cluster.world_size == on_nodes.world_size]
        if whole:
            fallbacks.append(Fallback.of(whole[0]))
            continue
        # The first family's fate (the simplest one searched), as the plan table words it.
        fates = next((f"{family}: {fate}" for family, fate in result.rejected.items()), "no layout fits")
        fallbacks.append(Fallback(num_nodes=nodes, world_size=on_nodes.world_size, why_not=fates))
    low, high = fitting_range(fallbacks, node_range)
    return ElasticPlan(
        min_nodes=low,
        max_nodes=high,
        gpus_per_node=plan.cluster.gpus_per_node,
        max_restarts=max_restarts,
        fallbacks=fallbacks,
    )
