"""Which decoder layers each pipeline stage runs.

The plan may fix the split (engine.json `stage_split`, layers per stage);
otherwise layers are balanced by cost, counting the embedding on the first
stage and the LM head (plus loss) on the last as extra work, so those stages
get fewer layers when the vocabulary is large. A plan's split may give the
first stage 0 layers (it runs the embedding alone) and the last 0 layers (the
final norm, head and loss alone), the slots Llama 3 405B gave them
(planner/contract/layout.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.contract.layout import stage_map_runs
from planner.errors import UserInputError


def stage_layer_ranges(
    n_layers: int,
    pp: int,
    stage_split: Sequence[int] | None = None,
    *,
    layer_costs: Sequence[float] | None = None,
    first_extra: float = 0.0,
    last_extra: float = 0.0,
) -> list[tuple[int, int]]:
    """[start, end) layer indices per stage; every stage gets at least one layer, except that a given
    split may leave the first and the last stage without any (the embedding or the head alone)."""
    if stage_split is not None:
        if not (len(stage_split) == pp and sum(stage_split) == n_layers and stage_map_runs(list(stage_split))):
            raise UserInputError(
                f"stage_split {list(stage_split)} must list {pp} layer counts summing to {n_layers}, each at "
                "least 1 (the first and last may be 0: the embedding or the head alone)"
            )
        counts = list(stage_split)
    elif pp < 1 or pp > n_layers:
        raise UserInputError(f"{pp} pipeline stages need at least {pp} layers; the model has {n_layers}")
    else:
        counts = balanced_split(list(layer_costs or [1.0] * n_layers), pp, first_extra, last_extra)
    ranges, start = [], 0
    for count in counts:
        ranges.append((start, start + count))
        start += count
    return ranges


def balanced_split(costs: list[float], pp: int, first_extra: float, last_extra: float) -> list[int]:
    """Contiguous split minimising the most expensive stage (exact, by dynamic programming)."""
    n = len(costs)
    prefix = [0.0]
    for cost in costs:
        prefix.append(prefix[-1] + cost)

    def stage_cost(stage: int, start: int, end: int) -> float:
        extra = (first_extra if stage == 0 else 0.0) + (last_extra if stage == pp - 1 else 0.0)
        return prefix[end] - prefix[start] + extra

    inf = float("inf")
    # best[s][i]: smallest max-stage cost covering layers [0, i) with s + 1 stages
    best = [[inf] * (n + 1) for _ in range(pp)]
    cut = [[0] * (n + 1) for _ in range(pp)]
    for end in range(1, n + 1):
        best[0][end] = stage_cost(0, 0, end)
    for stage in range(1, pp):
        for end in range(stage + 1, n + 1):
            for start in range(stage, end):
                value = max(best[stage - 1][start], stage_cost(stage, start, end))
                if value < best[stage][end] - 1e-12:
                    best[stage][end], cut[stage][end] = value, start
    counts, end = [], n
    for stage in range(pp - 1, 0, -1):
        start = cut[stage][end]
        counts.append(end - start)
        end = start
    counts.append(end)
    return counts[::-1]
