"""The numbers a plan's report page shows, taken from the search's Plans with each figure's source.

Nothing here is computed anew: memory components are MemoryEstimate.per_gpu_bytes, step-time parts are
StepTimeBreakdown's fields (which sum to the step time, planner/throughput/estimate.py), reasons and fates are
the search's own sentences (planner/search/explain.py). The page embeds this model as JSON (docs/running.md,
"Report"), so what it draws can be checked against plan.json.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.memory.estimate import CATEGORIES
from planner.plan import Plan
from planner.search.result import SearchResult
from planner.search.strategy_layout import family_label

# StepTimeBreakdown fields whose sum is the step time (planner/throughput/estimate.py), and how the page names
# them. Communication is the exposed part: what overlaps compute costs no step time.
STEP_PARTS = {
    "compute_s": "compute",
    "recompute_s": "recompute",
    "exposed_comm_s": "communication (exposed)",
    "pipeline_bubble_s": "pipeline bubble",
    "offload_s": "offload",
    "optimizer_step_s": "optimizer step",
    "measured_shortfall_s": "measured shortfall (no mechanism read)",
}


class Source(BaseModel):
    """Where one kind of number comes from, and which candidates (by rank) it holds for."""

    model_config = ConfigDict(frozen=True)

    number: str  # e.g. "memory: activations", "throughput: compute_s"
    source: str
    ranks: list[int]


class CandidateView(BaseModel):
    """One ranked candidate as the page draws it."""

    model_config = ConfigDict(frozen=True)

    rank: int = Field(ge=1)
    strategy: str
    layout: dict[str, int]  # dp, tp, pp, cp, ep as placed on the cluster
    micro_batch: int
    grad_accum: int
    activation_checkpointing: str
    memory_bytes: dict[str, int]  # CATEGORIES at the step's peak, per GPU
    memory_total_bytes: int
    peak_phase: str
    usable_bytes: int  # the GPU's memory less the headroom
    capacity_bytes: int
    fits: bool
    step_time_s: float | None  # None: no throughput estimate
    step_time_parts_s: dict[str, float]  # STEP_PARTS keys
    tokens_per_s: float | None
    mfu: float | None
    reasons: list[str]
    # What training the plan's token budget takes: ThroughputEstimate.time_to_train_s, gpu_hours and cost_usd, the
    # figures `plan` prints in its days/cost column (None: no throughput, or no price for cost_usd).
    time_to_train_s: float | None = None
    gpu_hours: float | None = None
    cost_usd: float | None = None


class TrainBudget(BaseModel):
    """The token budget the time and cost figures are for, and the price's, each with its source."""

    model_config = ConfigDict(frozen=True)

    tokens: float
    tokens_source: str  # as `plan` says it: --tokens, the run's --steps, or the default (and whether the run's)
    price_usd_per_gpu_hour: float | None
    price_source: str  # GpuSpec.price_note(): the catalog entry with its date, the user's --price, or none


class PageData(BaseModel):
    """What both pages hold: a title, the sources of the plan's numbers, and the names of the step-time parts."""

    model_config = ConfigDict(frozen=True)

    title: str
    sources: list[Source]
    step_part_labels: dict[str, str] = Field(default_factory=lambda: dict(STEP_PARTS))


class PlanReport(PageData):
    kind: Literal["plan"] = "plan"
    objective: str
    candidates: list[CandidateView]  # ranked: candidates[0] is the plan
    rejected: dict[str, str]  # strategy family -> why it lost, one line
    suggestions: list[str]
    calibration: str | None
    cluster_assumptions: list[str]
    budget: TrainBudget | None = None  # None: no plan to price


def candidate_view(plan: Plan, rank: int, tokens: float | None = None) -> CandidateView:
    """A Plan's figures for the page, unchanged; with `tokens`, what training them takes on it."""
    memory, speed = plan.memory, plan.throughput
    world = plan.cluster.world_size
    priced = speed is not None and tokens is not None
    breakdown = speed.breakdown.model_dump() if speed else {}
    return CandidateView(
        rank=rank,
        strategy=family_label(plan.config),
        layout={name: int(getattr(plan.layout, name) or 1) for name in ("dp", "tp", "pp", "cp", "ep")},
        micro_batch=plan.config.micro_batch,
        grad_accum=plan.config.grad_accum,
        activation_checkpointing=plan.config.activation_checkpointing.value,
        memory_bytes={name: memory.per_gpu_bytes[name] for name in CATEGORIES if name in memory.per_gpu_bytes},
        memory_total_bytes=memory.total,
        peak_phase=memory.peak_phase,
        usable_bytes=memory.usable_bytes,
        capacity_bytes=memory.gpu_capacity_bytes,
        fits=memory.fits,
        step_time_s=speed.step_time_s if speed else None,
        step_time_parts_s={name: breakdown[name] for name in STEP_PARTS if name in breakdown} if speed else {},
        tokens_per_s=speed.tokens_per_s if speed else None,
        mfu=speed.mfu if speed else None,
        reasons=list(plan.reasons),
        time_to_train_s=speed.time_to_train_s(tokens) if priced else None,  # type: ignore[union-attr,arg-type]
        gpu_hours=speed.gpu_hours(tokens, world) if priced else None,  # type: ignore[union-attr,arg-type]
        cost_usd=speed.cost_usd(tokens, world) if priced else None,  # type: ignore[union-attr,arg-type]
    )


def plan_sources(plans: list[Plan]) -> list[Source]:
    """Every number's source over the candidates, each (number, source) pair once with the ranks it holds for."""
    found: dict[tuple[str, str], list[int]] = {}
    for rank, plan in enumerate(plans, 1):
        pairs = [(f"memory: {name}", text) for name, text in plan.memory.sources.items()]
        if plan.throughput is not None:
            pairs += [(f"throughput: {name}", text) for name, text in plan.throughput.sources.items()]
        pairs.append(("price per GPU-hour", plan.cluster.gpu.price_source))
        for pair in pairs:
            found.setdefault(pair, []).append(rank)
    return [Source(number=number, source=source, ranks=ranks) for (number, source), ranks in found.items()]


def plan_report(result: SearchResult, title: str, tokens_source: str = "--tokens") -> PlanReport:
    """The page's data for a search: its ranked candidates with what training result.train_tokens takes on each
    (tokens_source: where that count came from, as `plan` says it), the families' fates, and the sources."""
    plans = list(result.candidates)
    best = result.best
    budget = None
    if best is not None:
        gpu = best.cluster.gpu
        budget = TrainBudget(
            tokens=result.train_tokens,
            tokens_source=tokens_source,
            price_usd_per_gpu_hour=gpu.price_usd_per_hour,
            price_source=gpu.price_note(),
        )
    return PlanReport(
        title=title,
        objective=result.objective.value,
        budget=budget,
        candidates=[candidate_view(plan, rank, result.train_tokens) for rank, plan in enumerate(plans, 1)],
        rejected=dict(result.rejected),
        suggestions=list(result.suggestions),
        sources=plan_sources(plans),
        calibration=best.calibration if best else None,
        cluster_assumptions=list(best.cluster.assumptions) if best else [],
    )
