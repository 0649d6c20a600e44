"""The strategy search: every way to train a model on a cluster, filtered to fits, ranked, explained.

- request.py: PlanRequest (batch, objective, limits) and the objectives.
- strategy_layout.py: what a layout is, its family label and its simplicity.
- layouts.py: the DDP, FSDP and ZeRO layouts valid for the model and cluster; engine_layouts.py: the
  engine's TP x PP x CP x EP ones.
- batching.py: micro-batch x gradient-accumulation pairs for a global batch.
- candidates.py: memory first, throughput for fits, with exact pruning.
- explain.py: each plan's reasons and each family's fate, with sources.
- suggest.py: what would fit when nothing does.
- search.py: search_plans, the entry point (docs/search.md).

The names below are imported on first use: the CLI's option modules read
planner.search.request (the objectives) to build `--help`, and importing this
package must not load the estimators, the plan model and the explanations
with it (a third of `--help`'s start-up).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.search.request import Objective, PlanRequest
    from planner.search.result import SearchResult, SearchStats
    from planner.search.search import require_best, search_plans

_HOMES = {
    "Objective": "planner.search.request",
    "PlanRequest": "planner.search.request",
    "SearchResult": "planner.search.result",
    "SearchStats": "planner.search.result",
    "require_best": "planner.search.search",
    "search_plans": "planner.search.search",
}
__all__ = ["Objective", "PlanRequest", "SearchResult", "SearchStats", "require_best", "search_plans"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later look-ups skip this function
    return value
