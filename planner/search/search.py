"""search_plans: every way to train this model on this cluster, filtered to what fits, ranked (docs/search.md)."""

from __future__ import annotations

import bisect
import time
from operator import attrgetter

from planner.calibration_lines import is_corrected, line_for_plan
from planner.contract.search_restrictions import SearchRestrictions
from planner.contract.sources import CORRECTED_SOURCES
from planner.errors import UserInputError
from planner.evaluate import memory_on, stack_memory_of
from planner.hardware.cluster import ClusterSpec
from planner.memory.estimate import MemoryEstimate
from planner.models.families import splits_over_tp
from planner.models.spec import ModelSpec
from planner.plan import Plan
from planner.search.batching import resolve_global_batch
from planner.search.candidates import CandidateEvaluator, Scored, ThroughputAdjust, cluster_variants
from planner.search.checkpointing_modes import searched_checkpointing
from planner.search.compression import auto_line, check_compression_request, compression_lines
from planner.search.engine_layouts import (
    ENGINE_MODEL_TYPES,
    engine_applicability,
    engine_layouts,
    tensor_parallel_degrees,
)
from planner.search.explain import TIE_TOLERANCE, family_fates, plan_reasons
from planner.search.layouts import splits_the_model
from planner.search.request import Objective, PlanRequest, search_restrictions
from planner.search.result import SearchResult, SearchStats
from planner.search.strategy_layout import FSDP_LABELS, family_label
from planner.search.suggest import PLAN_FLAGS, SuggestionFlags, suggestions
from planner.throughput.implementation import KERNELS_ON_SPLIT_MODELS, runs_kernels_on_split_models
from planner.training_config import FsdpSharding, KernelChoice, Strategy, TrainingConfig


def _check_request(spec: ModelSpec, request: PlanRequest) -> None:
    """Errors that no layout can avoid, raised once and plainly."""
    precision = {"precision": request.precision} if request.precision else {}
    probe = TrainingConfig(
        seq_len=request.seq_len,
        lora_rank=request.lora_rank,
        qlora=request.qlora,
        fp8=request.fp8,
        kernels=request.kernels,
        routing=request.routing_for(Strategy.DDP),  # the capacity is checked against the engine's candidates
        **precision,
    )
    probe.check_against(spec, 1, 1)
    # A router's settings on a dense model: the same one line (model_copy skips the engine-only check).
    probe.model_copy(update={"routing": request.routing}).check_against(spec, 1, 1)


_score_of = attrgetter("score")


def _pick(items: list[Scored]) -> tuple[Scored, Scored]:
    """(chosen, best-scoring): among candidates within TIE_TOLERANCE of the best score, the one
    on the most GPUs (same cost, sooner done), then the simplest, then a measured one (evidence before a
    correction's inference: a micro-batch x accumulation split never run, timed by its measured sibling, ties
    with it: docs/benchmarks.md, "Calibration")."""
    fastest = max(items, key=_score_of)
    threshold = fastest.score * (1 - TIE_TOLERANCE)  # once, not per item: the cost objective scores thousands
    close = [item for item in items if item.score >= threshold]
    chosen = min(
        close, key=lambda item: (-item.cluster.world_size, item.layout.complexity, not _measured(item), -item.score)
    )
    return chosen, fastest


def _measured(item: Scored) -> bool:
    """Whether a benchmark record gave this candidate's step (only an adjusted candidate has its estimate yet)."""
    return item.estimate is not None and item.estimate.sources.get("step_time_s", "").startswith(CORRECTED_SOURCES[1])


def _to_plan(
    item: Scored,
    spec: ModelSpec,
    memory: MemoryEstimate,
    reasons: list[str],
    calibration: str | None,
    search: SearchRestrictions,
    corrected_elsewhere: list[str],
) -> Plan:
    return Plan(
        search=search,
        model=spec,
        cluster=item.cluster,
        config=item.config,
        memory=memory,
        throughput=item.throughput,
        reasons=reasons,
        calibration=line_for_plan(
            calibration, item.cluster.gpu.name, item.config, item.throughput, corrected_elsewhere
        ),
    )


def _not_applicable(spec: ModelSpec, cluster: ClusterSpec, request: PlanRequest) -> dict[str, str]:
    """The requested strategy families that cannot run here, and why (shown with the plans' fates)."""
    not_applicable = {}
    if "fsdp-hybrid" in request.strategies and not cluster.is_multi_node:
        not_applicable["FSDP hybrid"] = (
            "hybrid sharding shards inside a node and replicates across nodes; on one node it is full sharding "
            "(--fsdp-sharding full), or plan 2 or more --nodes"
        )
    if cluster.gpu.kind == "cpu":  # layouts.py leaves them out there: the emitted FSDP1 configs fail on CPU
        for sharding in (sharding for sharding in FsdpSharding if not sharding.fsdp2):
            alias, label = f"fsdp-{FSDP_LABELS[sharding]}", f"FSDP {FSDP_LABELS[sharding]}"
            if alias in request.strategies and label not in not_applicable:
                not_applicable[label] = (
                    "FSDP1's shardings (no-shard, hybrid) do not run on CPU processes: the Trainer's FSDP1 syncs "
                    "module states through an accelerator; plan fsdp-full, fsdp-grad-op or ddp there"
                )
    offloading = {"fsdp", "fsdp-full", "fsdp-hybrid", "deepspeed", "zero2", "zero3"}  # the kinds with offload layouts
    if cluster.gpu.memory_is_host and request.allow_offload and offloading & set(request.strategies):
        not_applicable["CPU offload"] = (  # layouts.py leaves it out: the search's pruning rules (candidates.py)
            "not searched: the cpu device's memory is the host RAM that offload moves the states to, so it frees "
            "nothing and adds copies to the step (`estimate --offload-optimizer cpu` shows the accounting)"
        )
    if "engine" in request.strategies:
        why = engine_applicability(spec)
        if why is None and request.lora_rank:
            why = "LoRA runs on DDP, FSDP or DeepSpeed"
        if why is not None:
            not_applicable["engine (TP/PP)"] = why
        elif request.kernels is not KernelChoice.EAGER and not runs_kernels_on_split_models(request.implementation):
            # layouts.py leaves them out; with nothing of the engine's left (no EP, CP or compressed DP layout),
            # `--strategies engine` is one line, not "nothing fits" (an audit)
            left = any(
                not splits_the_model(layout)
                for layout in engine_layouts(spec, cluster, request.seq_len, request.compression)
            )
            not_applicable["engine TP/PP under --kernels" if left else "engine (TP/PP)"] = (
                f"--kernels {request.kernels.value}: {KERNELS_ON_SPLIT_MODELS}; plan them with --kernels eager"
            )
        elif spec.model_type in ENGINE_MODEL_TYPES and not splits_over_tp(spec.model_type):
            not_applicable["engine TP"] = (
                f"the engine pipelines {spec.model_type} models but does not split them over tp"
            )
        elif cluster.gpus_per_node > 1 and tensor_parallel_degrees(spec, cluster) == [1]:
            not_applicable["engine TP"] = (
                f"no tensor-parallel degree up to {cluster.gpus_per_node} (one node) splits {spec.name}'s "
                f"{spec.num_heads} heads and {spec.num_kv_heads} key/value heads evenly"
            )
    return not_applicable


# The requested kinds each label of _not_applicable rules out whole ("engine TP" leaves the engine's pipelines).
RULES_OUT = {"FSDP hybrid": "fsdp-hybrid", "FSDP no-shard": "fsdp-no-shard", "engine (TP/PP)": "engine"}


def _check_something_applies(request: PlanRequest, not_applicable: dict[str, str], flags: SuggestionFlags) -> None:
    """Every requested strategy ruled out (--strategies engine with --lora-rank): one line that says why, not
    "nothing fits" and a hunt for more GPUs that could never help."""
    ruled_out = {RULES_OUT[label] for label in not_applicable if label in RULES_OUT}
    if set(request.strategies) <= ruled_out:
        name = flags.strategies or "the strategies"
        why = "; ".join(f"{label}: {reason}" for label, reason in not_applicable.items() if label in RULES_OUT)
        raise UserInputError(f"{name} {','.join(request.strategies)} leaves nothing to search ({why}); name a "
                             f"strategy that applies in {name}")  # fmt: skip


def search_plans(
    spec: ModelSpec,
    cluster: ClusterSpec,
    request: PlanRequest = PlanRequest(),
    throughput_adjust: ThroughputAdjust | None = None,
    *,
    calibration: str | None = None,
    suggest: bool = True,
    flags: SuggestionFlags = PLAN_FLAGS,
) -> SearchResult:
    """Enumerate, filter to fits, rank by the request's objective, explain.

    throughput_adjust lets measured records replace or correct the estimate of
    each candidate before ranking; `calibration` says how, for the plans.
    When nothing fits, `suggest` searches other clusters for what would
    (suggest.py); the searches it runs there do not suggest in turn.
    """
    started = time.perf_counter()
    _check_request(spec, request)
    # A probe of another size (suggest=False: suggestions, elastic fallbacks) reports what fits there instead.
    check_compression_request(spec, cluster.world_size if suggest else None, request)
    if request.objective is Objective.COST and cluster.gpu.price_usd_per_hour is None:
        raise UserInputError(f"--objective cost: no price for {cluster.gpu.name}: {cluster.gpu.price_source}")
    if request.fp8:
        from planner.throughput.estimate import check_fp8_gpu

        check_fp8_gpu(TrainingConfig(fp8=True), cluster)
    as_stated = request  # the batch as the user stated it: a total (--global-batch), or per GPU (--micro-batch)
    global_batch, batch_note = resolve_global_batch(request, cluster.world_size)
    request = request.model_copy(update={"global_batch": global_batch})
    not_applicable = _not_applicable(spec, cluster, request)
    _check_something_applies(request, not_applicable, flags)
    evaluator = CandidateEvaluator(spec, request, throughput_adjust)
    scored: list[Scored] = []
    for variant in cluster_variants(cluster, request.objective):
        scored += evaluator.run(variant)

    tokens = request.tokens_to_train(spec.params.total)
    # (chosen, best-scoring) of each family that fits: the first names its entry, the second its reasons' best.
    family_picks = {name: _pick(record.fitting) for name, record in evaluator.families.items() if record.fitting}
    family_best = {name: chosen for name, (chosen, _) in family_picks.items()}

    best_item: Scored | None = None
    plans: list[Plan] = []
    suggestion_lines: list[str] = []
    if scored:
        best_item, fastest = _pick(scored)
        # The chosen family's entry is the chosen plan itself.
        family_best[best_item.layout.family] = best_item
        ranked = sorted(family_best.values(), key=lambda item: (item is not best_item, -item.score))
        # Every score negated, ascending: a plan's rank is 1 + the number of higher scores, found by bisection.
        negated_scores = sorted(-item.score for item in scored)
        reported = ranked[: request.top_k]
        restrictions = search_restrictions(request)  # what every reported plan was searched under
        whole = None  # the best plan on the whole cluster, which a reported plan on fewer GPUs is compared with
        if any(item.cluster.world_size < cluster.world_size for item in reported):
            whole = max((other for other in scored if other.cluster is cluster), key=_score_of, default=None)
        searched = searched_checkpointing(
            spec, request.activation_checkpointing, bool(request.lora_rank or request.qlora)
        )
        for item in reported:
            stack = stack_memory_of(request.implementation)
            memory = memory_on(
                spec, item.config, item.cluster, headroom_fraction=request.headroom_fraction, stack=stack
            )
            reasons = plan_reasons(
                item,
                memory,
                request,
                searched=searched,
                rank=1 + bisect.bisect_left(negated_scores, -item.score),
                fitting=len(scored),
                tokens=tokens,
                fastest=fastest if item is best_item else family_picks[item.layout.family][1],
            )
            if item.cluster.world_size < cluster.world_size:
                gain = (
                    f"; the best plan on all {cluster.world_size} scores {whole.score / item.score:.2f}x of this"
                    if whole
                    else ""
                )
                reasons.append(
                    f"uses {item.cluster.world_size} of the {cluster.world_size} GPUs: better {request.objective.value} "
                    f"than spreading over all of them{gain}"
                )
            reasons += compression_lines(item.config, item.cluster.world_size)
            if item.config.zeropp:
                from planner.throughput.zeropp import zeropp_lines  # here: only a ZeRO++ plan

                reasons += zeropp_lines(item.cluster.world_size, item.cluster.gpus_per_node, spec.params.total)
            why_compressed = auto_line(item, scored, request, tokens) if item is best_item else None
            reasons += [why_compressed] if why_compressed else []
            if batch_note:
                reasons.append(batch_note)
            positions_note = spec.beyond_trained_positions(item.config.seq_len)
            reasons += [positions_note] if positions_note else []
            # The families the records moved, which the plan was ranked against: its line names them.
            corrected = [family_label(o.config) for o in ranked if o is not item and is_corrected(o.throughput)]
            plans.append(_to_plan(item, spec, memory, reasons, calibration, restrictions, corrected))
    elif suggest:
        if set(request.strategies) <= {"engine"} and cluster.world_size == 1:  # not memory: no layout at all
            name = flags.strategies or "the strategies"
            raise UserInputError(
                f"{name} engine on 1 GPU: our engine's layouts split the model over 2 or more GPUs (tp or pp); "
                f"plan ddp, fsdp or deepspeed on one GPU, or give the engine 2 or more"
            )

        def plan_fits(other: ClusterSpec, **update) -> bool:
            # Another GPU count holds the batch as stated: a per-GPU batch grows with the count, a total stays.
            probe = as_stated.model_copy(update={"top_k": 1, **update})
            try:
                return search_plans(spec, other, probe, throughput_adjust, suggest=False).best is not None
            except UserInputError:  # nothing the request asks for runs there (FSDP hybrid on one node)
                return False

        stated_total = as_stated.global_batch is not None
        suggestion_lines = suggestions(spec, cluster, request, plan_fits, stated_total=stated_total, flags=flags)

    rejected = family_fates(spec, request, evaluator.families, best_item, family_best, not_applicable)
    counters = evaluator.counters
    stats = SearchStats(
        considered=counters.considered,
        memory_evaluations=counters.memory_evaluations,
        throughput_evaluations=counters.throughput_evaluations,
        pruned=counters.pruned,
        fitting=counters.fitting,
        throughput_skipped=counters.throughput_skipped,
        elapsed_s=time.perf_counter() - started,
    )
    return SearchResult(
        best=plans[0] if plans else None,
        candidates=plans,
        rejected=rejected,
        suggestions=suggestion_lines,
        objective=request.objective,
        train_tokens=tokens,
        stats=stats,
    )


def require_best(result: SearchResult, what: str) -> Plan:
    """The best plan, or a one-line UserInputError saying what would fit."""
    if result.best is None:
        hint = result.suggestions[0] if result.suggestions else "try more or larger GPUs"
        raise UserInputError(f"no plan fits {what}; {hint}")
    return result.best
