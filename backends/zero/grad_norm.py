"""The global gradient norm and the fp16 overflow flag, over every rank that holds part of the model.

Under data parallelism alone, ZeRO's flat fp32 gradient shard is this rank's
slice of the whole model: the squared norm is the sum of the shards' over dp
(ZeRO-0 ranks all hold every element, so there is nothing to sum).

Under tensor or pipeline parallelism each rank's units hold a different part
of the model, and some of it more than once: a TP-replicated parameter (norm,
row bias, position embedding) lives on every TP rank, and the last pipeline
stage's copy of a tied embedding repeats the first stage's.
ParallelModel.grad_norm_weights() says how much each parameter's squared
gradient counts (1/tp, 0, ...); after the dp sum, model_parallel_sum adds the
tp and pp ranks, so every model parameter counts once. The overflow flag is
MAX-reduced over the same groups, or ranks would skip different steps and
diverge.

Cheap per step: the segments of the flat shard whose weight is not 1 are
found once, as views grouped by weight; the step takes the plain norm of the
whole shard and corrects it by (weight - 1) x each group's squared norm.
Squares are summed in fp32 over rows of ROW elements and in fp64 across rows:
one fp32 sum over a million-element shard is off by ~1e-5 relative on a CPU,
which clipping would pass on to every parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from backends.zero.flat_unit import FlatUnit

ROW = 4096


def squared_sum(flat: Any) -> Any:
    """sum(flat ** 2) as an fp64 scalar tensor, with no fp64 copy of `flat`."""
    import torch

    rows = flat.numel() // ROW
    total = torch.zeros((), dtype=torch.float64, device=flat.device)
    if rows:
        total += torch.linalg.vector_norm(flat[: rows * ROW].view(rows, ROW), dim=1).double().pow(2).sum()
    return total + torch.linalg.vector_norm(flat[rows * ROW :]).double().pow(2)


def weighted_segments(units: list[FlatUnit], flat: Any, weights: dict[str, float]) -> dict[float, list[Any]]:
    """Weight -> views of `flat` (laid out like the units' shards) covering the parameters of that weight != 1."""
    spans: list[tuple[int, int, float]] = []
    for unit in units:
        owned_start, owned_end = unit.owned_range
        for name, param, offset in zip(unit.names, unit.params, unit.offsets):
            weight = weights.get(name, 1.0)
            start, end = max(offset, owned_start), min(offset + param.numel(), owned_end)
            if weight == 1.0 or start >= end:
                continue
            begin = unit.shard_start + start - owned_start
            span_end = begin + end - start
            if spans and spans[-1][1] == begin and spans[-1][2] == weight:  # adjacent, same weight: one view
                begin = spans.pop()[0]
            spans.append((begin, span_end, weight))
    grouped: dict[float, list[Any]] = {}
    for begin, end, weight in spans:
        grouped.setdefault(weight, []).append(flat[begin:end])
    return grouped


class GlobalGradientNorm:
    """Squared-norm and overflow reductions for one ZeroOptimizer's flat gradient shard."""

    def __init__(
        self,
        units: list[FlatUnit],
        grads: Any,
        *,
        sharded: bool,
        dp_reduce: Callable[[Any, str], None],
        model_parallel: Any | None = None,
    ):
        self.grads = grads
        self.sharded = sharded
        self.dp_reduce = dp_reduce
        self.model_parallel = model_parallel
        weights = model_parallel.grad_norm_weights() if model_parallel is not None else {}
        self.segments = weighted_segments(units, grads, weights)

    def _model_parallel_reduce(self, value: Any, op: str) -> None:
        if self.model_parallel is None:
            return
        import torch.distributed as dist

        self.model_parallel.model_parallel_sum(value, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}[op])

    def any_overflow(self, device: Any) -> bool:
        """True when any rank of the model (any dp, tp or pp coordinate) has an inf or nan gradient."""
        import torch

        bad = torch.tensor([0.0 if bool(torch.isfinite(self.grads).all()) else 1.0], device=device)
        self.dp_reduce(bad, "max")
        self._model_parallel_reduce(bad, "max")
        return float(bad.item()) > 0

    def norm(self, device: Any, local_ranks: int = 0) -> float:
        """L2 norm of the whole model's gradient (the shard must hold the final, unscaled gradients).

        local_ranks: the data-parallel ranks when each holds its own unaveraged gradient (1-bit Adam after its
        warm-up, backends/parts/onebit_adam.py): the root mean square of their norms, the same on every rank
        (so clipping and the anomaly guard agree) and no smaller than the norm of the mean gradient."""
        square = squared_sum(self.grads)
        for weight, views in self.segments.items():
            square += (weight - 1.0) * sum(squared_sum(view) for view in views)
        square = square.clamp(min=0.0).reshape(1).to(device)
        if self.sharded or local_ranks:
            self.dp_reduce(square, "sum")
        if local_ranks:
            square /= local_ranks
        self._model_parallel_reduce(square, "sum")
        return float(square.item()) ** 0.5
