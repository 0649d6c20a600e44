"""Our engine's layouts: tensor, pipeline, context and expert parallelism with a ZeRO stage (docs/parallelism.md).

Every layout produced here already satisfies TrainingConfig's constraints for this model and cluster (TP inside
a node and dividing the heads, PP dividing the layers or following the default stage map, CP only for long
sequences), so the search builds configs without re-checking them. Which models the engine can take at all is
engine_applicability's answer.
"""

from __future__ import annotations

from functools import lru_cache

from planner.contract.layout import default_stage_layers
from planner.hardware.cluster import ClusterSpec
from planner.models.families import parallel_model_types, splits_over_tp
from planner.models.spec import ModelFamily, ModelSpec
from planner.search.request import CompressionRequest
from planner.search.strategy_layout import SIMPLICITY, StrategyLayout, divisors, make_layout, parallel_dims
from planner.training_config import GradientCompression, PipelineSchedule, Strategy

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


def _dense_layouts(
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
            "layout": parallel_dims(chunks, stage_map, named_degrees),
            # Sequence parallelism moves the same bytes as TP's all-reduces
            # and divides the activations by tp (Korthikanti et al. 2022): always on.
            "sequence_parallel": degrees["tp"] > 1,
            "pipeline_schedule": schedule,
            "compression": compression,
        }
        layouts.append(make_layout(complexity + stage // 2 + _compression_complexity(compression), fields))
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


def engine_layouts(
    spec: ModelSpec, cluster: ClusterSpec, seq_len: int, compression: CompressionRequest
) -> list[StrategyLayout]:
    """The engine's layouts for a model it can train (engine_applicability is None): expert parallelism for a
    mixture of experts, TP x PP x CP otherwise."""
    if spec.is_moe:
        return _expert_layouts(spec, cluster, compression)
    return _dense_layouts(spec, cluster, seq_len, compression)
