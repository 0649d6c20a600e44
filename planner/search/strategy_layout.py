"""What a layout is: the strategy fields it fixes, its family's name, and how simple it is (docs/search.md).

A StrategyLayout fixes everything of a TrainingConfig except the batch, precision and activation
checkpointing, which the search crosses with it. layouts.py lists the DDP, FSDP and ZeRO layouts valid for a
model and cluster, engine_layouts.py the engine's TP x PP x CP x EP ones; both build them here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from planner.contract.layout import ParallelDims
from planner.training_config import (
    FsdpSharding,
    GradientCompression,
    Offload,
    PipelineSchedule,
    Precision,
    Strategy,
    TrainingConfig,
)

FSDP_LABELS = {
    FsdpSharding.FULL: "full-shard",
    FsdpSharding.GRAD_OP: "grad-op",
    FsdpSharding.HYBRID: "hybrid",
    FsdpSharding.NONE: "no-shard",
}


def family_label(config: TrainingConfig) -> str:
    """The strategy family of a config, as `rejected` and the plan table name it."""
    if config.strategy is Strategy.DDP:
        return "DDP"
    if config.strategy is Strategy.FSDP:
        offload = Offload.CPU in (config.offload_params, config.offload_optimizer)
        return f"FSDP {FSDP_LABELS[config.fsdp_sharding]}{' + CPU offload' if offload else ''}"
    if config.strategy is Strategy.DEEPSPEED:
        if Offload.NVME in (config.offload_params, config.offload_optimizer):
            return "ZeRO-Infinity (NVMe offload)"
        if config.offload_params is not Offload.NONE:
            return f"ZeRO-{config.zero_stage} + param offload"
        if config.offload_optimizer is not Offload.NONE:
            return f"ZeRO-{config.zero_stage} + offload"
        if config.zeropp:
            return "ZeRO++"
        return f"ZeRO-{config.zero_stage}"
    tp, pp = config.tensor_parallel, config.pipeline_parallel
    compressed = f" + {config.compression.value}" if config.compression is not GradientCompression.NONE else ""
    if config.expert_parallel > 1:
        return "engine EP" + compressed
    parts = [name for name, degree in (("TP", tp), ("PP", pp), ("CP", config.context_parallel)) if degree > 1]
    return "engine " + ("×".join(parts) or "DP") + compressed


# Lower is simpler. Among plans whose scores are within the estimate's error of the best
# (search/explain.py, TIE_TOLERANCE), the simplest wins, in this order (docs/search.md):
# DDP; FSDP grad-op / ZeRO-1; ZeRO-2; FSDP full-shard / ZeRO-3; our engine (TP/PP); offload.
# Within a pair, PyTorch-native FSDP comes first: one dependency fewer to install and debug.
SIMPLICITY = {
    "ddp": 0,
    "fsdp-none": 1,  # NO_SHARD: DDP semantics through FSDP
    "fsdp-grad-op": 2,
    "zero1": 3,
    "zero2": 4,
    "fsdp-full": 5,
    "fsdp-hybrid": 5,
    "zero3": 6,
    "zero3-zeropp": 7,  # ZeRO-3 with three more DeepSpeed switches (--zeropp)
    "engine": 10,  # + pipeline, + both, + ZeRO stage: 10-13
    "fsdp-offload": 20,
    "zero2-offload-optimizer": 21,
    "zero3-offload-optimizer": 22,
    "zero3-offload-all": 23,
    "zero3-offload-nvme": 24,
}


@dataclass(frozen=True)
class StrategyLayout:
    family: str  # the strategy family the `rejected` report speaks of
    # Simpler layouts win ties: fewer moving parts, fewer ways to fail.
    complexity: int
    fields: dict = field(hash=False, compare=False)  # TrainingConfig fields this layout fixes
    # Read off `fields` once: the search reads them for every layout of every search (layouts are memoised).
    tensor_parallel: int = field(init=False, repr=False, hash=False, compare=False)
    pipeline_parallel: int = field(init=False, repr=False, hash=False, compare=False)
    # Ranks sharing one data-parallel replica (tp x pp x cp).
    model_parallel: int = field(init=False, repr=False, hash=False, compare=False)
    # Accumulation steps must be a multiple of this (interleaved 1F1B runs rounds of pp).
    micro_batch_rounds: int = field(init=False, repr=False, hash=False, compare=False)

    def precision_at(self, searched: Precision) -> Precision:
        """The precision this layout trains in: the search's, unless the layout pins one (ZeRO++: fp16-mixed)."""
        return self.fields.get("precision", searched)

    def __post_init__(self) -> None:
        dims = self.fields.get("layout")
        pp = dims.pp if dims is not None else 1
        interleaved = self.fields.get("pipeline_schedule") is PipelineSchedule.INTERLEAVED
        object.__setattr__(self, "tensor_parallel", dims.tp if dims is not None else 1)
        object.__setattr__(self, "pipeline_parallel", pp)
        object.__setattr__(self, "model_parallel", dims.model_parallel if dims is not None else 1)
        object.__setattr__(self, "micro_batch_rounds", pp if interleaved else 1)


def make_layout(complexity: int, fields: dict) -> StrategyLayout:
    """The layout these TrainingConfig fields make, its family named once per distinct fields."""
    return StrategyLayout(_family_of(tuple(fields.items())), complexity, fields)


@lru_cache(maxsize=4096)
def _family_of(fields: tuple[tuple[str, object], ...]) -> str:
    """family_label of the config these fields make, validated once per distinct fields: every cluster the
    search looks at offers the same DDP, FSDP and ZeRO layouts and many of the same engine ones."""
    return family_label(TrainingConfig(**dict(fields)))


@lru_cache(maxsize=4096)
def parallel_dims(
    virtual_stages: int, stage_layers: tuple[int, ...] | None, degrees: tuple[tuple[str, int], ...]
) -> ParallelDims:
    """One ParallelDims per distinct value (it is frozen), validated once; `degrees` as (name, degree) pairs."""
    return ParallelDims(virtual_stages=virtual_stages, stage_layers=stage_layers, **dict(degrees))


def divisors(n: int) -> tuple[int, ...]:
    """Ascending divisors of n, in O(sqrt n); remembered, since the search asks for the same few numbers'
    divisors for every layout of every cluster slice."""
    return _divisors(n)


@lru_cache(maxsize=4096)
def _divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return (*small, *[n // d for d in reversed(small) if d * d != n])
