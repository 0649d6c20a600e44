"""The serving layouts of a model on a cluster, the best that fits, and why (docs/inference.md).

A layout is tp x pp GPUs per replica and as many replicas as the cluster
holds (layouts.py: which tp the heads allow; the others are listed with why).
Ranking:
- throughput: generated tokens/s of the whole cluster (the sum over the replicas, each serving its share of the
  concurrent requests: one more on some where they do not divide evenly);
- latency: the shortest time between tokens, then the shortest TTFT.
Within 5% of the best (the roofline's error is larger), the replica on fewer
GPUs wins, then tensor over pipeline parallelism.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import UserInputError
from planner.hardware.cluster import ClusterSpec, make_cluster
from planner.hardware.gpus import load_gpu_catalog
from planner.hardware.memory_cap import capped_like, gpu_label
from planner.inference.cost import cost_line, serving_cost
from planner.inference.flags import PLAN_SERVING_FLAGS, ServingFlags
from planner.inference.known_error import ttft_band
from planner.inference.layouts import (
    PP_CAVEAT,
    PP_CAVEAT_SHORT,
    excluded_tensor_parallel,
    serving_layouts,
    tp_refusal,
)
from planner.inference.memory import SOURCES, ServingMemory, serving_memory
from planner.inference.precision import check_sixteen_bit, sixteen_bit_for, sixteen_bit_note
from planner.inference.request import (
    DEFAULT_CONTEXT_TOKENS,
    DEFAULT_OUTPUT_TOKENS,
    InferenceRequest,
    KvFormat,
    ServingObjective,
    WeightFormat,
)
from planner.inference.speed import SOURCE as SPEED_SOURCE
from planner.inference.speed import STATIC, ServingSpeed, serving_speed
from planner.models.spec import ModelFamily, ModelSpec
from planner.search.strategy_layout import divisors
from planner.units import GIB, counted, format_seconds

TIE_TOLERANCE = 0.05


class ServingPlan(BaseModel):
    """One serving layout with its memory per GPU and its speed; every number says where it came from."""

    model_config = ConfigDict(frozen=True)

    model: str
    gpu: str
    gpus_per_node: int
    nodes: int
    tensor_parallel: int
    pipeline_parallel: int
    replicas: int  # replicas serving the request's concurrent requests (at most one per request)
    batch_per_replica: int
    request: InferenceRequest
    memory_bytes: dict[str, int]  # per GPU: weights, kv_cache, activations, overhead, total
    memory_sources: dict[str, str]
    gpu_capacity_bytes: int
    usable_bytes: int
    max_batch: int  # concurrent requests of this length the replicas' memory holds
    ttft_s: float
    itl_s: float
    decode_tokens_per_s: float  # per replica: running requests / ITL
    request_tokens_per_s: float  # per replica, generated tokens/s over whole requests (prefill and queue included)
    cluster_tokens_per_s: float  # generated tokens/s of all replicas
    regime: str  # single request, batched, saturated (queueing) or static batch (planner/inference/speed.py)
    running_per_replica: int  # the effective decode batch of a replica
    max_running_per_replica: int  # requests of this length a replica's KV cache holds
    bounds: dict[str, str]  # prefill / decode: "compute" or "memory"
    speed_source: str
    # USD per million generated tokens at usd_per_gpu_hour for the GPUs the plan uses (cost.py); None: no price
    usd_per_million_tokens: float | None = None
    usd_per_gpu_hour: float | None = None
    price_source: str = ""  # the price catalog's source, "user override" (--price), or why there is no price
    reasons: list[str] = Field(default_factory=list)

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def label(self) -> str:
        parts = [f"TP{self.tensor_parallel}" if self.tensor_parallel > 1 else ""]
        parts.append(f"PP{self.pipeline_parallel}" if self.pipeline_parallel > 1 else "")
        layout = "×".join(part for part in parts if part) or "1 GPU"
        return f"{layout} x {self.replicas} replica{'s' if self.replicas > 1 else ''}"


class ServingResult(BaseModel):
    best: ServingPlan | None
    candidates: list[ServingPlan]
    rejected: dict[str, str]  # layout label -> why it is not the answer
    suggestions: list[str]
    notes: list[str] = Field(default_factory=list)  # what was planned other than asked (precision.py)


def check_servable(
    spec: ModelSpec, cluster: ClusterSpec, request: InferenceRequest, flags: ServingFlags = PLAN_SERVING_FLAGS
) -> None:
    if spec.family is not ModelFamily.DECODER_ONLY:
        raise UserInputError(
            f"{spec.name} is {spec.family.value}; inference planning covers decoder-only LLMs (text generation)"
        )
    if spec.modality != "text":
        raise UserInputError(
            f"{spec.name} reads images as well as text; inference planning covers text-only LLMs (its vision "
            "tower is not in the serving estimate), so plan its training, or serve its LLM by name"
        )
    check_sixteen_bit(cluster, flags)
    if request.weights is WeightFormat.FP8 and not cluster.gpu.supports("fp8"):
        raise UserInputError(
            f"{cluster.gpu.name} has no fp8 matmuls; use {flags.set(flags.weights, 'int8')} or int4 (weight-only)"
        )
    if request.kv_cache is KvFormat.FP8 and cluster.gpu.architecture in ("Volta", "Turing"):
        raise UserInputError(f"{cluster.gpu.name} has no fp8 KV cache support; use {flags.set(flags.kv_cache, 'fp16')}")
    pinned = request.tensor_parallel
    if pinned is not None:
        name = flags.tensor_parallel or "tensor_parallel"
        if cluster.gpus_per_node % pinned:
            splits = ", ".join(str(d) for d in divisors(cluster.gpus_per_node) if tp_refusal(spec, d) is None)
            raise UserInputError(
                f"{name} {pinned} does not divide a node's {counted(cluster.gpus_per_node, 'GPU')}: tensor parallelism "
                f"stays inside a node; choose one of {splits}"
            )
        why = tp_refusal(spec, pinned)
        if why is not None:
            raise UserInputError(f"{name} {pinned}: {why} (vLLM and TensorRT-LLM split heads evenly)")
    window = spec.length_limit
    if window is not None and request.tokens_per_request > window:
        output = f" or {flags.output_tokens}" if flags.output_tokens else ""
        if request.output_defaulted:  # the prompt alone leaves no room for one generated token
            raise UserInputError(
                f"a {request.context}-token prompt leaves no room to generate within {spec.name}'s {window}-token "
                f"context; shorten {flags.context} (to {window - DEFAULT_OUTPUT_TOKENS} for the default "
                f"{DEFAULT_OUTPUT_TOKENS} output tokens)"
            )
        raise UserInputError(
            f"context + output ({request.context} + {request.output} = {request.tokens_per_request} tokens) "
            f"exceeds {spec.name}'s {window}-token context; shorten {flags.context}{output}"
        )


def context_note(spec: ModelSpec, request: InferenceRequest, flags: ServingFlags) -> str | None:
    """The line that says the default prompt was cut to half a short model's context, or None."""
    if not request.context_shortened:
        return None
    choose = f" ({flags.set(flags.context, 'N', placeholder=True)} sets it)" if flags.context else ""
    return (
        f"{request.context}-token prompts, not the default {DEFAULT_CONTEXT_TOKENS}: half {spec.name}'s "
        f"{spec.max_position_embeddings}-token context{choose}"
    )


def output_note(spec: ModelSpec, request: InferenceRequest, flags: ServingFlags) -> str | None:
    """The line that says the default output was shortened to fit the model's context, or None."""
    if not request.output_defaulted or request.output >= DEFAULT_OUTPUT_TOKENS:
        return None
    choose = f" ({flags.set(flags.output_tokens, 'N', placeholder=True)} sets it)" if flags.output_tokens else ""
    return (
        f"{request.output} output tokens per request, not the default {DEFAULT_OUTPUT_TOKENS}: {spec.name}'s "
        f"{spec.max_position_embeddings}-token context leaves {request.output} after the {request.context}-token "
        f"prompt{choose}"
    )


def _plan(
    spec: ModelSpec, cluster: ClusterSpec, request: InferenceRequest, tp: int, pp: int
) -> tuple[ServingPlan, ServingMemory]:
    """The request's concurrent requests spread over as many replicas as the cluster holds (and they fill).

    A replica whose KV cache holds fewer of them than it is sent runs what it holds and queues the rest. Where the
    requests do not divide evenly, some replicas serve one more than the others: the plan's latencies and memory are
    the busiest replica's, its tokens/s the sum over the replicas as each is loaded."""
    replicas = min(cluster.world_size // (tp * pp), request.batch)
    per_replica = request.model_copy(update={"batch": math.ceil(request.batch / replicas)})
    lighter = replicas * per_replica.batch - request.batch  # replicas sent one request fewer
    memory = serving_memory(spec, per_replica, cluster.gpu.memory_bytes, tp, pp)
    if not memory.fits and 1 <= memory.max_batch < per_replica.batch:
        # Continuous batching admits what the KV cache holds and queues the rest (the "saturated" regime).
        admitted = per_replica.model_copy(update={"batch": memory.max_batch})
        memory = serving_memory(spec, admitted, cluster.gpu.memory_bytes, tp, pp)
    speed: ServingSpeed = serving_speed(spec, per_replica, cluster, tp, pp)
    cluster_tokens_per_s = (replicas - lighter) * speed.request_tokens_per_s
    if lighter:
        fewer = per_replica.model_copy(update={"batch": per_replica.batch - 1})
        cluster_tokens_per_s += lighter * serving_speed(spec, fewer, cluster, tp, pp).request_tokens_per_s
    plan = ServingPlan(
        model=spec.name,
        gpu=cluster.gpu.name,
        gpus_per_node=cluster.gpus_per_node,
        nodes=cluster.num_nodes,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        replicas=replicas,
        batch_per_replica=per_replica.batch,
        request=request,
        memory_bytes=memory.breakdown(),
        memory_sources=dict(SOURCES),
        gpu_capacity_bytes=memory.capacity,
        usable_bytes=memory.usable,
        max_batch=memory.max_batch * replicas,
        ttft_s=speed.ttft_s,
        itl_s=speed.itl_s,
        decode_tokens_per_s=speed.decode_tokens_per_s,
        request_tokens_per_s=speed.request_tokens_per_s,
        cluster_tokens_per_s=cluster_tokens_per_s,
        regime=speed.regime,
        running_per_replica=speed.running,
        max_running_per_replica=speed.max_running,
        bounds={"prefill": speed.prefill_bound, "decode": speed.decode_bound},
        speed_source=SPEED_SOURCE,
        **_priced(cluster, replicas * tp * pp, cluster_tokens_per_s),
    )
    return plan, memory


def _priced(cluster: ClusterSpec, gpus: int, tokens_per_s: float) -> dict:
    cost = serving_cost(cluster.gpu, gpus, tokens_per_s)
    return {
        "usd_per_million_tokens": cost.usd_per_million_tokens,
        "usd_per_gpu_hour": cost.usd_per_gpu_hour,
        "price_source": cost.price_source,
    }


def _score(plan: ServingPlan, objective: ServingObjective) -> float:
    return plan.cluster_tokens_per_s if objective is ServingObjective.THROUGHPUT else 1.0 / plan.itl_s


def _slower(plan: ServingPlan, chosen: ServingPlan, objective: ServingObjective) -> str:
    """Why a fitting layout lost, in the objective's own quantity: the ratio of the ITLs (a time: longer is
    worse), or the share of tokens/s given up (a rate: fewer is worse), with both values (docs/inference.md)."""
    if objective is ServingObjective.THROUGHPUT:
        lost = 1 - plan.cluster_tokens_per_s / chosen.cluster_tokens_per_s
        return (
            f"fits, but {lost:.0%} fewer tokens/s than {chosen.label} "
            f"({plan.cluster_tokens_per_s:,.0f} vs {chosen.cluster_tokens_per_s:,.0f})"
        )
    return (
        f"fits, but {plan.itl_s / chosen.itl_s:.2f}x the time between tokens of {chosen.label} "
        f"({format_seconds(plan.itl_s)} vs {format_seconds(chosen.itl_s)})"
    )


def _reasons(plan: ServingPlan, rank: int, fitting: int, cluster: ClusterSpec) -> list[str]:
    memory, gpus = plan.memory_bytes, plan.replicas * plan.gpus_per_replica
    return [
        f"{plan.label} on {gpus} x {plan.gpu}: {memory['total'] / GIB:.1f} GiB per GPU "
        f"of {plan.usable_bytes / GIB:.1f} GiB usable (weights {memory['weights'] / GIB:.1f}, KV cache "
        f"{memory['kv_cache'] / GIB:.1f}, activations {memory['activations'] / GIB:.2f}) [memory: formula]",
        f"TTFT {format_seconds(plan.ttft_s)} ({plan.bounds['prefill']}-bound prefill of "
        + (f"{plan.batch_per_replica} x " if plan.regime == STATIC else "a ")
        + f"{plan.request.context}-token prompt{'s' if plan.regime == STATIC else ''}"
        + (", queueing included" if plan.running_per_replica < plan.batch_per_replica else "")
        + f"; {ttft_band(plan.regime)}), ITL {format_seconds(plan.itl_s)} ({plan.bounds['decode']}-bound decode), "
        f"{plan.request_tokens_per_s:,.0f} generated tokens/s per replica [{plan.speed_source}]",
        f"regime: {plan.regime}, {counted(plan.running_per_replica, 'request')} decoded per step of the "
        f"{plan.max_running_per_replica} a replica's KV cache holds"
        + (
            f"; the rest queue ({plan.batch_per_replica - plan.running_per_replica} per replica)"
            if plan.running_per_replica < plan.batch_per_replica
            else ""
        ),
        _split(plan) + "; the replicas' memory holds "
        f"{counted(plan.max_batch, 'concurrent request')} of "
        f"{plan.request.tokens_per_request} tokens",
        cost_line(serving_cost(cluster.gpu, gpus, plan.cluster_tokens_per_s), gpus, plan.cluster_tokens_per_s),
        *([PP_CAVEAT] if plan.pipeline_parallel > 1 else []),
        f"ranked 1st of {counted(fitting, 'fitting layout')}" if rank == 0 else f"ranked {rank + 1} of {fitting}",
    ]


def _split(plan: ServingPlan) -> str:
    """How the concurrent requests spread over the replicas: the same on each, or one more on some."""
    lighter = plan.replicas * plan.batch_per_replica - plan.request.batch
    if not lighter:
        return f"{counted(plan.batch_per_replica, 'request')} per replica"
    busier = plan.replicas - lighter
    return (
        f"{counted(plan.batch_per_replica, 'request')} on {counted(busier, 'replica')} and "
        f"{plan.batch_per_replica - 1} on {counted(lighter, 'replica')} (the latencies are the busier one's, "
        "tokens/s and the cost the sum)"
    )


def plan_serving(
    spec: ModelSpec, cluster: ClusterSpec, request: InferenceRequest, flags: ServingFlags = PLAN_SERVING_FLAGS
) -> ServingResult:
    """Every serving layout of `spec` on `cluster` for `request`: the best that fits, and why the others are not.

    `flags`: how the asking path spells each setting its errors and suggestions name (flags.py)."""
    check_servable(spec, cluster, request, flags)
    said = (context_note(spec, request, flags), output_note(spec, request, flags), sixteen_bit_note(cluster, request))
    notes = [note for note in said if note]
    request = sixteen_bit_for(cluster, request)
    fitting: list[ServingPlan] = []
    rejected: dict[str, str] = {}
    for tp, pp in serving_layouts(spec, cluster, request.tensor_parallel):
        plan, memory = _plan(spec, cluster, request, tp, pp)
        if memory.fits:
            fitting.append(plan)
        else:
            rejected[plan.label] = (
                f"{memory.total / GIB:.1f} GiB per GPU > {memory.usable / GIB:.1f} GiB usable "
                f"(weights {memory.weights / GIB:.1f}, KV cache {memory.kv_cache / GIB:.1f}) [memory: formula]"
            )
    if request.tensor_parallel is None:  # a pinned degree is checked by check_servable; the others were not asked
        rejected.update(excluded_tensor_parallel(spec, cluster))
    if not fitting:
        suggestions = serving_suggestions(spec, cluster, request, flags)
        return ServingResult(best=None, candidates=[], rejected=rejected, suggestions=suggestions, notes=notes)
    best_score = max(_score(plan, request.objective) for plan in fitting)
    tied = [plan for plan in fitting if _score(plan, request.objective) >= best_score * (1 - TIE_TOLERANCE)]
    chosen = min(
        tied, key=lambda plan: (plan.gpus_per_replica, plan.pipeline_parallel, -_score(plan, request.objective))
    )
    ranked = [chosen] + sorted((p for p in fitting if p is not chosen), key=lambda p: -_score(p, request.objective))
    for plan in ranked[1:]:
        if plan in tied:
            rejected[plan.label] = (
                f"fits, within {TIE_TOLERANCE:.0%} of {chosen.label}, which uses fewer GPUs per replica"
            )
        else:
            caveat = f" ({PP_CAVEAT_SHORT})" if plan.pipeline_parallel > 1 else ""
            rejected[plan.label] = _slower(plan, chosen, request.objective) + caveat
    shown = [
        plan.model_copy(update={"reasons": [*notes, *_reasons(plan, index, len(fitting), cluster)]})
        for index, plan in enumerate(ranked[: request.top_k])
    ]
    return ServingResult(best=shown[0], candidates=shown, rejected=rejected, suggestions=[], notes=notes)


def _fits_anywhere(spec: ModelSpec, cluster: ClusterSpec, request: InferenceRequest) -> bool:
    return any(
        serving_memory(spec, request, cluster.gpu.memory_bytes, tp, pp).fits
        for tp, pp in serving_layouts(spec, cluster, request.tensor_parallel)
    )


def serving_suggestions(
    spec: ModelSpec, cluster: ClusterSpec, request: InferenceRequest, flags: ServingFlags = PLAN_SERVING_FLAGS
) -> list[str]:
    """Each suggestion is checked: the same request fits when planned as printed, through the path that asked."""
    lines = []
    label = gpu_label(cluster.gpu)  # with a max_memory_gb cap, each suggestion is under it too
    where = f"{cluster.world_size} x {label}"
    smaller = [
        weights
        for weights in (WeightFormat.FP8, WeightFormat.INT8, WeightFormat.INT4)
        if weights.bits < request.weights.bits and (weights is not WeightFormat.FP8 or cluster.gpu.supports("fp8"))
    ]
    fitting = [
        weights for weights in smaller if _fits_anywhere(spec, cluster, request.model_copy(update={"weights": weights}))
    ]
    if fitting and flags.weights:
        lines.append(f"{flags.set(flags.weights, fitting[0].value)} fits on {where}")
    fp8_cache = request.model_copy(update={"kv_cache": KvFormat.FP8})
    fp8_allowed = request.kv_cache is not KvFormat.FP8 and cluster.gpu.architecture not in ("Volta", "Turing")
    if flags.kv_cache and fp8_allowed and _fits_anywhere(spec, cluster, fp8_cache):
        lines.append(f"{flags.set(flags.kv_cache, 'fp8')} fits on {where}")
    sizes = [(gpus, 1) for gpus in (2, 4, 8) if gpus > cluster.gpus_per_node] + [(8, nodes) for nodes in (2, 4, 8)]
    pinned = request.tensor_parallel
    if pinned is not None:  # the degree asked for stays, so more nodes of this node's size (it divides them)
        # Letting the degree go would not fit either: a pinned degree still pipelines over every GPU of the
        # cluster, and tensor or pipeline splits hold about the same bytes a GPU.
        sizes = [(cluster.gpus_per_node, nodes) for nodes in (2, 4, 8) if nodes > cluster.num_nodes]
    for per_node, nodes in sizes:
        if per_node * nodes <= cluster.world_size:
            continue
        bigger = make_cluster(cluster.gpu, gpus_per_node=per_node, nodes=nodes)
        if _fits_anywhere(spec, bigger, request):
            lines.append(f"{bigger.world_size} x {label} ({flags.cluster(bigger)}) fits")
            break
    if request.batch > 1:
        lines.append(f"a smaller {flags.batch} needs less KV cache")
    for catalog_gpu in sorted(load_gpu_catalog(), key=lambda g: g.memory_bytes):
        gpu = capped_like(catalog_gpu, cluster.gpu)
        if gpu.kind == "gpu" and gpu.memory_bytes > cluster.gpu.memory_bytes:
            other = make_cluster(gpu, gpus_per_node=cluster.gpus_per_node, nodes=cluster.num_nodes)
            try:
                check_servable(spec, other, request)
            except UserInputError:
                continue
            if _fits_anywhere(spec, other, request):
                # its memory said: a larger GPU than the one asked for (max_memory_gb's, or --gpu's)
                lines.append(
                    f"at {counted(cluster.world_size, 'GPU')}, {gpu.name} fits ({gpu.memory_bytes / GIB:.0f} GiB a GPU)"
                )
                break
    return lines or [f"nothing fits {spec.name} for this request up to 64 x {label}; shorten {flags.context}"]
