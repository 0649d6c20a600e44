"""The strategy search: every way to train a model on a cluster, filtered to fits, ranked, explained.

- request.py: PlanRequest (batch, objective, limits) and the objectives.
- layouts.py: strategy families and TP x PP x DP layouts valid for the model and cluster.
- batching.py: micro-batch x gradient-accumulation pairs for a global batch.
- candidates.py: memory first, throughput for fits, with exact pruning.
- explain.py: each plan's reasons and each family's fate, with sources.
- suggest.py: what would fit when nothing does.
- search.py: search_plans, the entry point (docs/search.md).
"""

from planner.search.request import Objective, PlanRequest
from planner.search.result import SearchResult, SearchStats
from planner.search.search import require_best, search_plans

__all__ = ["Objective", "PlanRequest", "SearchResult", "SearchStats", "require_best", "search_plans"]
