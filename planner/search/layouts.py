"""The ways to lay a model out on a cluster: strategy, sharding, offload, TP x PP x DP.

A StrategyLayout fixes everything of a TrainingConfig except the batch, precision and
activation checkpointing, which the search crosses with it. Every layout
produced here already satisfies TrainingConfig's constraints for this model
and cluster (TP inside a node and dividing the heads, PP dividing the layers),
so the search can build configs without re-checking them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from planner.contract.layout import ParallelDims, default_stage_layers
from planner.hardware.cluster import ClusterSpec
from planner.models.families import parallel_model_types, splits_over_tp
from planner.models.spec import ModelFamily, ModelSpec
from planner.search.request import FSDP_SHARDING_KINDS, ZERO_STAGE_KINDS, CompressionRequest, PlanRequest
from planner.training_config import (
    FsdpSharding,
    GradientCompression,
    Offload,
    PipelineSchedule,
    Strategy,
    TrainingConfig,
)

# Model types our engine has tensor-parallel plans for (backends/tensor_parallel,
# docs/parallelism.md); other models train with DDP, FSDP or DeepSpeed.
ENGINE_MODEL_TYPES = parallel_model_types()  # the registry's families with a tp/pp plan
# Catalog models of those types whose layout the engine's TP plans do not cover
# (backends/decoder_anatomy.py); ModelSpec does not carry the config flag that says so.
ENGINE_EXCLUDED_MODELS = {"opt-350m": "OPT with post-layer-norm and a projected embedding"}
# MoE model types whose experts the engine splits over ep ranks (backends/expert_parallel: transformers'
# fused experts modules); tests/test_expert_parallel_engine.py runs Mixtral, Qwen2/3-MoE and DeepSeek-V3 (V2's
# experts are the same module). gpt-oss and Llama 4 store theirs otherwise and are not offered.
EXPERT_PARALLEL_MODEL_TYPES = frozenset({"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3"})
# Context parallelism is offered from this sequence length, keeping at least CP_MIN_TOKENS per rank.
CP_FROM_SEQ_LEN, CP_MIN_TOKENS = 16384, 4096
# Interleaved 1F1B with this many model chunks per pipeline rank (Narayanan et al. 2021 use 2-4).
INTERLEAVED_CHUNKS = 2

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

    def __post_init__(self) -> None:
        dims = self.fields.get("layout")
        pp = dims.pp if dims is not None else 1
        interleaved = self.fields.get("pipeline_schedule") is PipelineSchedule.INTERLEAVED
        object.__setattr__(self, "tensor_parallel", dims.tp if dims is not None else 1)
        object.__setattr__(self, "pipeline_parallel", pp)
        object.__setattr__(self, "model_parallel", dims.model_parallel if dims is not None else 1)
        object.__setattr__(self, "micro_batch_rounds", pp if interleaved else 1)


def _layout(complexity: int, fields: dict) -> StrategyLayout:
    return StrategyLayout(_family_of(tuple(fields.items())), complexity, fields)


@lru_cache(maxsize=4096)
def _family_of(fields: tuple[tuple[str, object], ...]) -> str:
    """family_label of the config these fields make, validated once per distinct fields: every cluster the
    search looks at offers the same DDP, FSDP and ZeRO layouts and many of the same engine ones."""
    return family_label(TrainingConfig(**dict(fields)))


@lru_cache(maxsize=4096)
def _parallel_dims(
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


def _fsdp_layouts(cluster: ClusterSpec, allow_offload: bool, with_ddp: bool) -> list[StrategyLayout]:
    layouts = []
    for sharding in FsdpSharding:
        if sharding is FsdpSharding.HYBRID and not cluster.is_multi_node:
            continue  # inside one node hybrid sharding is full sharding
        if sharding is FsdpSharding.NONE and with_ddp:
            continue  # DDP through FSDP: DDP itself is searched, and is what anyone would run
        if not sharding.fsdp2 and cluster.gpu.kind == "cpu":
            continue  # emitted as FSDP1, which fails on CPU ranks (accelerate's module-state sync, its state dict)
        base = {"strategy": Strategy.FSDP, "fsdp_sharding": sharding}
        layouts.append(_layout(SIMPLICITY[f"fsdp-{sharding.value}"], base))
        if allow_offload and sharding in (FsdpSharding.FULL, FsdpSharding.HYBRID):
            offload = {**base, "offload_params": Offload.CPU, "offload_optimizer": Offload.CPU}
            layouts.append(_layout(SIMPLICITY["fsdp-offload"], offload))
    return layouts


def _deepspeed_layouts(cluster: ClusterSpec, allow_offload: bool) -> list[StrategyLayout]:
    layouts = []
    for stage in (1, 2, 3):
        base = {"strategy": Strategy.DEEPSPEED, "zero_stage": stage}
        layouts.append(_layout(SIMPLICITY[f"zero{stage}"], base))
        if not allow_offload:
            continue
        if stage >= 2:  # ZeRO-Offload (Ren et al. 2021) is built on stage 2
            layouts.append(
                _layout(SIMPLICITY[f"zero{stage}-offload-optimizer"], {**base, "offload_optimizer": Offload.CPU})
            )
        if stage == 3:
            both = {**base, "offload_optimizer": Offload.CPU, "offload_params": Offload.CPU}
            layouts.append(_layout(SIMPLICITY["zero3-offload-all"], both))
            if cluster.nvme_per_node_bytes:
                nvme = {**base, "offload_optimizer": Offload.NVME, "offload_params": Offload.NVME}
                layouts.append(_layout(SIMPLICITY["zero3-offload-nvme"], nvme))
    return layouts


def engine_applicability(spec: ModelSpec) -> str | None:
    """Why our engine cannot train this model, or None when it can."""
    if spec.family is not ModelFamily.DECODER_ONLY:
        return f"tensor/pipeline parallelism covers decoder-only models; {spec.name} is {spec.family.value}"
    if spec.is_moe:
        if spec.model_type in EXPERT_PARALLEL_MODEL_TYPES:
            return None  # expert parallelism only (_expert_layouts)
        return f"{spec.name} is a mixture of experts whose experts the engine cannot split yet"
    if spec.model_type not in ENGINE_MODEL_TYPES:
        return f"no tensor-parallel plan for model type '{spec.model_type}' yet"
    if spec.name in ENGINE_EXCLUDED_MODELS:
        return f"{spec.name} is {ENGINE_EXCLUDED_MODELS[spec.name]}, which the engine's TP plans do not cover"
    return None


def tensor_parallel_degrees(spec: ModelSpec, cluster: ClusterSpec) -> list[int]:
    """TP inside a node, dividing the heads, with KV heads split or replicated evenly; [1] for a family whose
    plan the engine pipelines but does not split over tp (DeepSeek-V3)."""
    if spec.model_type in ENGINE_MODEL_TYPES and not splits_over_tp(spec.model_type):
        return [1]
    degrees = []
    for tp in divisors(cluster.gpus_per_node):
        if cluster.world_size % tp or spec.num_heads % tp:
            continue
        if tp > 1 and spec.num_kv_heads % tp and tp % spec.num_kv_heads:
            continue
        degrees.append(tp)
    return degrees


def context_parallel_degrees(seq_len: int, ranks: int) -> list[int]:
    """cp for long sequences (from CP_FROM_SEQ_LEN): dividing the ranks left by tp x pp, each rank holding
    at least CP_MIN_TOKENS of every sequence in two chunks (zig-zag: docs/parallelism.md)."""
    if seq_len < CP_FROM_SEQ_LEN:
        return [1]
    return [cp for cp in divisors(ranks) if seq_len % (2 * cp) == 0 and seq_len // cp >= CP_MIN_TOKENS]


def _engine_layouts(
    spec: ModelSpec, cluster: ClusterSpec, seq_len: int, compression: CompressionRequest
) -> list[StrategyLayout]:
    world = cluster.world_size
    layouts = []
    for tp in tensor_parallel_degrees(spec, cluster):
        # The engine splits sequences over cp beside tp, with pp 1 (backends/parallelize.py).
        for cp in context_parallel_degrees(seq_len, world // tp):
            layouts += _engine_tp_pp_layouts(spec, cluster, tp, cp, compression)
    return layouts


def _compressed_stages(stages: list[int], compression: GradientCompression) -> list[int]:
    """Compressed, ZeRO-0 (both phases of the sum compressed) can beat ZeRO-1 (its parameter all-gather is
    not): stage 0 is tried too. onebit is 1-bit Adam, which runs on ZeRO-0 alone (planner/gradient_compression.py)."""
    if compression is GradientCompression.ONEBIT:
        return [0]
    return stages if compression is GradientCompression.NONE or 0 in stages else [0, *stages]


def _compression_complexity(compression: GradientCompression) -> int:
    """A compressed layout is one step less simple than the same one uncompressed: it wins only past the tie."""
    return 0 if compression is GradientCompression.NONE else 1


@lru_cache(maxsize=1024)
def _pipeline_schedules(layers: int, pp: int) -> tuple[tuple[PipelineSchedule, int, tuple[int, ...] | None], ...]:
    """(schedule, chunks per rank, stage map) the search tries at pp: 1F1B over the default map; interleaved
    with 2 chunks per rank when they divide the layers (Narayanan et al. 2021); and interleaved one-layer
    chunks, the embedding and the head each taking a chunk of their own when pp divides layers + 2 (Llama 3
    405B: 126 + 2 over pp 16, 8 per rank; docs/parallelism.md), the smallest bubble at the most transfers.
    Remembered: every cluster slice asks again."""
    uneven = layers % pp != 0
    schedules = [(PipelineSchedule.ONE_F_ONE_B, 1, default_stage_layers(layers, pp) if uneven else None)]
    if pp == 1:
        return tuple(schedules)
    if not uneven and (layers // pp) % INTERLEAVED_CHUNKS == 0:
        schedules.append((PipelineSchedule.INTERLEAVED, INTERLEAVED_CHUNKS, None))
    one_layer = (layers + 2) // pp if (layers + 2) % pp == 0 else (0 if uneven else layers // pp)
    if one_layer > INTERLEAVED_CHUNKS:
        chunks = one_layer * pp
        stage_map = default_stage_layers(layers, chunks) if chunks != layers else None
        schedules.append((PipelineSchedule.INTERLEAVED, one_layer, stage_map))
    return tuple(schedules)


def pipeline_degrees(spec: ModelSpec, world: int, tp: int) -> list[int]:
    """Every pp that `world` ranks hold beside tp, dividing the layers or not (an uneven pp runs the default
    stage map of planner/contract/layout.py, as Llama 3 405B ran pp 16 over 126 layers)."""
    degrees = set(divisors(spec.num_layers)) | {d for d in divisors(world // tp) if d <= spec.num_layers}
    return [pp for pp in sorted(degrees) if world % (tp * pp) == 0]


def _engine_tp_pp_layouts(
    spec: ModelSpec, cluster: ClusterSpec, tp: int, cp: int, compression: CompressionRequest
) -> list[StrategyLayout]:
    world = cluster.world_size // cp  # the ranks one context-parallel slice of the job spans
    layouts = []
    for pp in pipeline_degrees(spec, world, tp):
        if cp > 1 and pp > 1:
            continue
        dp = world // (tp * pp)
        zero_ranks = dp * cp  # under cp the engine's ZeRO runs over the dp x cp ranks (every one holds the model)
        choices = compression.choices(zero_ranks)
        if tp == 1 and pp == 1 and cp == 1:
            # Data parallelism alone on the engine is DeepSpeed's ZeRO (searched as such) unless it compresses.
            choices = tuple(choice for choice in choices if choice is not GradientCompression.NONE)
        # ZeRO-1 shards the optimizer for the price of DDP's traffic (reduce-scatter +
        # all-gather = all-reduce), so it dominates stage 0; ZeRO-2/3 re-gather per
        # micro-batch, which a pipeline runs many of, so PP keeps stage 1.
        stages = ([1] if pp > 1 else [1, 2, 3]) if zero_ranks > 1 else [0]
        complexity = SIMPLICITY["engine"] + (pp > 1) + (tp > 1 and pp > 1) + (cp > 1)
        for choice in choices:
            for stage in _compressed_stages(stages, choice):
                layouts += _engine_schedules(spec, stage, choice, complexity, tp=tp, pp=pp, cp=cp)
    return layouts


def _engine_schedules(
    spec: ModelSpec, stage: int, compression: GradientCompression, complexity: int, **degrees: int
) -> list[StrategyLayout]:
    """One engine layout (its tp/pp/cp/ep `degrees`) at one ZeRO stage and compression, under each pipeline
    schedule the search tries."""
    layouts = []
    named_degrees = tuple(degrees.items())
    for schedule, chunks, stage_map in _pipeline_schedules(spec.num_layers, degrees["pp"]):
        fields = {
            "strategy": Strategy.ENGINE,
            "zero_stage": stage,
            "layout": _parallel_dims(chunks, stage_map, named_degrees),
            # Sequence parallelism moves the same bytes as TP's all-reduces
            # and divides the activations by tp (Korthikanti et al. 2022): always on.
            "sequence_parallel": degrees["tp"] > 1,
            "pipeline_schedule": schedule,
            "compression": compression,
        }
        layouts.append(_layout(complexity + stage // 2 + _compression_complexity(compression), fields))
    return layouts


def _expert_layouts(spec: ModelSpec, cluster: ClusterSpec, compression: CompressionRequest) -> list[StrategyLayout]:
    """The engine's expert parallelism: ep dividing the experts and the data-parallel ranks, ZeRO on the ep ranks'
    expert-data-parallel group (backends/expert_parallel/apply.py); for a family with a parallel plan beside pp
    (the stages hand the routers' load-balancing sums on, backends/expert_parallel/router_loss.py; ZeRO-1 under
    pp as for a dense model) and, when it splits over tp (Mixtral, Qwen3-MoE, without dense MLP layers), tp
    (sequence parallelism on, each expert's ffn split too); cp 1."""
    world = cluster.world_size
    with_plan = spec.model_type in ENGINE_MODEL_TYPES
    # The engine's tp splits MoE blocks only: a config that keeps dense MLP layers among them is not split.
    over_tp = with_plan and not spec.dense_layers
    layouts = []
    for tp in tensor_parallel_degrees(spec, cluster) if over_tp else [1]:
        if (spec.expert_ffn_size or spec.ffn_size) % tp:
            continue
        for pp in pipeline_degrees(spec, world, tp) if with_plan else [1]:
            dp = world // (tp * pp)
            for ep in divisors(spec.num_experts):
                if (ep == 1 and tp == 1 and pp == 1) or dp % ep:
                    continue
                stages = ([1] if pp > 1 else [0, 1, 2, 3]) if dp // ep > 1 else [0]
                complexity = SIMPLICITY["engine"] + (tp > 1) + (pp > 1) + (tp > 1 and pp > 1)
                for choice in compression.choices(dp // ep):
                    for stage in _compressed_stages(stages, choice):
                        layouts += _engine_schedules(spec, stage, choice, complexity, ep=ep, tp=tp, pp=pp)
    return layouts


# (spec, what enumerate_layouts reads of the cluster and the request) -> (spec, its layouts).
_LAYOUTS: dict[tuple, tuple[ModelSpec, tuple[StrategyLayout, ...]]] = {}


def enumerate_layouts(spec: ModelSpec, cluster: ClusterSpec, request: PlanRequest) -> list[StrategyLayout]:
    """Every layout the request allows for this model on this cluster. Memoised by the values it reads (the
    spec, the cluster's GPUs per node, nodes and whether it has NVMe, the request's strategy fields): every
    search of the model on a cluster of that shape gets the same layout objects, which the search's own
    caches key on (planner/search/candidates.py)."""
    key = (
        id(spec),
        cluster.gpus_per_node,
        cluster.num_nodes,
        bool(cluster.nvme_per_node_bytes),
        request.strategies,
        request.allow_offload,
        request.lora_rank,
        request.qlora,
        request.seq_len,
        request.compression,
    )
    entry = _LAYOUTS.get(key)
    if entry is None or entry[0] is not spec:
        if len(_LAYOUTS) >= 1024:
            _LAYOUTS.clear()
        entry = _LAYOUTS[key] = (spec, tuple(_enumerate_layouts(spec, cluster, request)))  # holds the spec
    return list(entry[1])


def _enumerate_layouts(spec: ModelSpec, cluster: ClusterSpec, request: PlanRequest) -> list[StrategyLayout]:
    wanted = set(request.strategies)
    layouts: list[StrategyLayout] = []
    if "ddp" in wanted:
        layouts.append(_layout(SIMPLICITY["ddp"], {"strategy": Strategy.DDP}))
    shardings = {sharding for kind, sharding in FSDP_SHARDING_KINDS.items() if kind in wanted}
    if "fsdp" in wanted or shardings:  # fsdp-full / fsdp-grad-op pin the sharding
        layouts += [
            layout
            for layout in _fsdp_layouts(cluster, request.allow_offload, with_ddp="ddp" in wanted)
            if "fsdp" in wanted or layout.fields["fsdp_sharding"].value in shardings
        ]
    stages = {stage for kind, stage in ZERO_STAGE_KINDS.items() if kind in wanted}
    if "deepspeed" in wanted or stages:
        layouts += [
            layout
            for layout in _deepspeed_layouts(cluster, request.allow_offload)
            if "deepspeed" in wanted or layout.fields["zero_stage"] in stages
        ]
    if "engine" in wanted and engine_applicability(spec) is None and not request.lora_rank:
        compression = request.compression
        layouts += (
            _expert_layouts(spec, cluster, compression)
            if spec.is_moe
            else _engine_layouts(spec, cluster, request.seq_len, compression)
        )
    if request.qlora:
        # The 4-bit base cannot be partitioned by ZeRO-3.
        layouts = [
            kept
            for kept in layouts
            if not (kept.fields.get("strategy") is Strategy.DEEPSPEED and kept.fields.get("zero_stage") == 3)
        ]
    return layouts
