"""The cheapest cloud x GPU x count that trains a token budget by a deadline (docs/search.md, "Cost across clouds").

For every price of the chosen clouds (planner/cost/prices.py) and every cluster of its instances (one planned node
is one rented instance, so the shape timed is the shape rented and preempted: instances of a whole 8-GPU server
doubling up to `max_gpus`; a smaller instance, whose network between instances the catalog does not record, only
as one instance), the strategy search (planner/search) finds the fastest plan at exactly that shape; its tokens/s
is the planner's own estimate.
Time = tokens / tokens/s (with spot, stretched by expected preemptions: planner/cost/preemption.py); cost =
time x GPUs x the price. The options that meet the deadline are ranked by cost; the winner is the cheapest, and
each cloud shows its two cheapest. One search per GPU and count, shared by every cloud that rents them.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from planner.contract.run_config import CheckpointPolicy
from planner.cost.preemption import DEFAULT_PREEMPTION_RATE, DEFAULT_RESTART_MINUTES, PreemptionCost, preemption_cost
from planner.cost.prices import SERVER_GPUS, CloudPrice

NODE_GPUS = SERVER_GPUS  # one planned node of a cluster: a whole server (planner/cost/prices.py)
DEFAULT_MAX_GPUS = 256


class CostOption(BaseModel):
    """One cloud x GPU x count: the plan's speed (the planner's estimate) and what it costs there."""

    model_config = ConfigDict(frozen=True)

    cloud: str
    region: str
    gpu: str
    gpus: int = Field(ge=1)
    gpus_per_node: int = Field(ge=1)
    nodes: int = Field(ge=1)
    strategy: str
    tokens_per_s: float = Field(gt=0)
    step_time_s: float = Field(gt=0)
    price_usd_per_gpu_hour: float = Field(ge=0)
    price_source: str  # CloudPrice.cite(), or "--price (user)"
    stale: bool
    spot: bool
    time_s: float = Field(gt=0)  # wall time, with expected preemptions when spot (math.inf: never finishes)
    cost_usd: float = Field(ge=0)
    preemption: PreemptionCost | None = None
    meets_deadline: bool


class CloudCostResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    tokens: float = Field(gt=0)
    deadline_s: float = Field(gt=0)
    spot: bool
    best: CostOption | None
    per_cloud: dict[str, list[CostOption]]  # each cloud's two cheapest that meet the deadline
    considered: list[CostOption]  # every cloud x GPU x count that has a plan, deadline or not
    skipped: list[str]  # why some prices were not considered (no spot price, nothing fits)
    one_instance: list[str] = []  # prices of instances smaller than a server, planned and priced as one instance


class CostRequest(BaseModel):
    """How to price the run: budget, deadline, spot or not, the run's checkpoint interval, the search bounds."""

    model_config = ConfigDict(frozen=True)

    tokens: float = Field(gt=0)
    deadline_s: float = Field(gt=0)
    spot: bool = False
    price_override: float | None = Field(default=None, ge=0)  # --price: one USD per GPU-hour for every entry
    max_gpus: int = Field(default=DEFAULT_MAX_GPUS, ge=1)
    # the run's --save-every; by default the emitted run's (planner/contract/run_config.py, CheckpointPolicy)
    checkpoint_every_steps: int = Field(default=CheckpointPolicy.model_fields["every"].default, ge=0)
    preemption_rate: float = Field(default=DEFAULT_PREEMPTION_RATE, ge=0)
    restart_s: float = Field(default=DEFAULT_RESTART_MINUTES * 60, ge=0)
    today: dt.date


def gpu_counts(gpus_per_instance: int, max_gpus: int) -> list[tuple[int, int]]:
    """(GPUs per node, nodes) for every cluster searched, each node one rented instance: an instance of a whole
    server (NODE_GPUS or more) as 1, 2, 4, ... nodes up to max_gpus; a smaller one (GCP's a3-highgpu-1g, a pod
    priced per GPU) as one instance only. Planning 8 of them as one NVLink node would time a machine that is not
    the one rented, and count its preemptions per GPU; a cluster of them crosses a network the catalog does not
    record, so its speed would be a guess."""
    if gpus_per_instance > max_gpus:
        return []
    if gpus_per_instance < NODE_GPUS:
        return [(gpus_per_instance, 1)]
    shapes = []
    nodes = 1
    while gpus_per_instance * nodes <= max_gpus:
        shapes.append((gpus_per_instance, nodes))
        nodes *= 2
    return shapes


def _one_instance_note(entry: CloudPrice) -> str:
    return f"{entry.cloud} {entry.region} {entry.gpu} ({entry.instance}, {entry.gpus_per_instance} GPU)"


# (gpu name, GPUs per node, nodes) -> the fastest plan's (strategy, tokens/s, step time s), or None: nothing fits
PlanSpeed = Callable[[str, int, int], "tuple[str, float, float] | None"]


def _option(entry: CloudPrice, shape: tuple[int, int], speed: tuple[str, float, float], request: CostRequest):
    per_node, nodes = shape
    gpus = per_node * nodes
    strategy, tokens_per_s, step_time_s = speed
    price = request.price_override if request.price_override is not None else entry.price(request.spot)
    assert price is not None  # entries without a spot price are skipped before
    source = "--price (user)" if request.price_override is not None else entry.cite(request.today, request.spot)
    work_s = request.tokens / tokens_per_s
    preemption = None
    wall_s = work_s
    if request.spot:
        preemption = preemption_cost(
            work_s,
            gpus=gpus,
            gpus_per_instance=entry.gpus_per_instance,
            price_per_gpu_hour=price,
            step_time_s=step_time_s,
            checkpoint_every_steps=request.checkpoint_every_steps,
            rate_per_instance_hour=request.preemption_rate,
            restart_s=request.restart_s,
        )
        wall_s = preemption.wall_s
    return CostOption(
        cloud=entry.cloud,
        region=entry.region,
        gpu=entry.gpu,
        gpus=gpus,
        gpus_per_node=per_node,
        nodes=nodes,
        strategy=strategy,
        tokens_per_s=tokens_per_s,
        step_time_s=step_time_s,
        price_usd_per_gpu_hour=price,
        price_source=source,
        stale=request.price_override is None and entry.stale(request.today),
        spot=request.spot,
        time_s=wall_s,
        cost_usd=wall_s / 3600.0 * gpus * price if math.isfinite(wall_s) else math.inf,
        preemption=preemption,
        meets_deadline=wall_s <= request.deadline_s,
    )


def _rank_key(option: CostOption) -> tuple:
    return (option.cost_usd, option.time_s, option.cloud, option.region, option.gpu, option.gpus)


def cheapest_across_clouds(entries: list[CloudPrice], request: CostRequest, plan_speed: PlanSpeed) -> CloudCostResult:
    """Every entry x count priced with plan_speed's estimate; the cheapest that meets the deadline, and each
    cloud's two cheapest. Speeds are computed once per (GPU, count) and shared between clouds."""
    speeds: dict[tuple[str, int, int], tuple[str, float, float] | None] = {}
    considered: list[CostOption] = []
    skipped: list[str] = []
    one_instance: list[str] = []
    for entry in entries:
        if request.spot and request.price_override is None and entry.spot is None:
            skipped.append(f"{entry.cloud} {entry.region} {entry.gpu}: no spot price in the catalog")
            continue
        if entry.gpus_per_instance < NODE_GPUS:
            one_instance.append(_one_instance_note(entry))
        fitted = 0
        for shape in gpu_counts(entry.gpus_per_instance, request.max_gpus):
            key = (entry.gpu, *shape)
            if key not in speeds:
                speeds[key] = plan_speed(*key)
            if speeds[key] is not None:
                fitted += 1
                considered.append(_option(entry, shape, speeds[key], request))  # type: ignore[arg-type]
        if not fitted:
            within = (
                f"on one {entry.instance} ({entry.gpus_per_instance} GPU(s))"
                if entry.gpus_per_instance < NODE_GPUS
                else f"up to {request.max_gpus} GPUs"
            )
            skipped.append(f"{entry.cloud} {entry.region} {entry.gpu}: no plan fits {within}")
    meeting = sorted((option for option in considered if option.meets_deadline), key=_rank_key)
    per_cloud: dict[str, list[CostOption]] = {}
    for option in meeting:
        if len(per_cloud.setdefault(option.cloud, [])) < 2:
            per_cloud[option.cloud].append(option)
    return CloudCostResult(
        tokens=request.tokens,
        deadline_s=request.deadline_s,
        spot=request.spot,
        best=meeting[0] if meeting else None,
        per_cloud=per_cloud,
        considered=considered,
        skipped=skipped,
        one_instance=one_instance,
    )
