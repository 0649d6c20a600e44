"""What the strategy search returns (docs/search.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from planner.plan import Plan
from planner.search.request import Objective


class SearchStats(BaseModel):
    """How much work the search did; `considered` counts every candidate decided."""

    model_config = ConfigDict(frozen=True)

    considered: int = 0  # every (layout, precision, AC, micro-batch, accum) decided
    memory_evaluations: int = 0  # memory estimator calls
    throughput_evaluations: int = 0  # throughput estimator calls (fitting, non-dominated candidates)
    # Decided without an estimator call: larger micro-batch than one that does not fit
    # (memory grows with the micro-batch), or more recomputation than a candidate that fits.
    pruned: int = 0
    fitting: int = 0  # candidates that fit, estimated or implied
    # Fitting candidates left unestimated: a smaller micro-batch than one already slower than the next larger.
    throughput_skipped: int = 0
    elapsed_s: float = 0.0


class SearchResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    best: Plan | None
    candidates: list[Plan] = Field(default_factory=list)  # best plan of each strategy family, ranked
    rejected: dict[str, str] = Field(default_factory=dict)  # strategy family -> its fate, one line
    suggestions: list[str] = Field(default_factory=list)  # what would make it fit, when nothing does
    objective: Objective = Objective.THROUGHPUT
    train_tokens: float = 0.0
    stats: SearchStats = Field(default_factory=SearchStats)
