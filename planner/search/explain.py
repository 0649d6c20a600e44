"""Plain-sentence explanations: why each plan, and each strategy family's fate.

Every number carries its source in brackets: the memory estimator's formula,
the throughput estimator's (or a calibration's), or the catalog.
"""

from __future__ import annotations

from planner.contract.layout import describe_stage_layers
from planner.evaluate import memory_on, memory_total_on, stack_memory_of
from planner.memory.estimate import MemoryEstimate
from planner.memory.model_states import BF16_RUNS_MIXED, runs_bf16_as_mixed
from planner.models.spec import ModelSpec
from planner.search.candidates import FamilyRecord, Scored
from planner.search.checkpointing_modes import DOMINATED_BY
from planner.search.request import Objective, PlanRequest
from planner.throughput.result import ThroughputEstimate
from planner.training_config import ActivationCheckpointing, TrainingConfig
from planner.units import GIB, counted, format_dollars

# Plans within this share of the best score count as equal, and the simplest of them wins:
# 3 in 4 rows of the throughput validation table are within 5% (docs/accuracy.md), so a
# smaller gap between two plans is not a difference the estimate can vouch for.
TIE_TOLERANCE = 0.05
SIMPLICITY_RULE = "within the estimate's error: DDP, then FSDP grad-op / ZeRO-1, ZeRO-2, FSDP full / ZeRO-3, ZeRO++, engine TP/PP, offload"

MEMORY_SOURCE = "memory: formula, ZeRO paper + Korthikanti et al. (per-category sources in the plan)"

# Breakdown fields, and how a user would name them as the reason a plan is slower.
SLOWDOWN_CAUSES = {
    "compute_s": "less efficient matmuls (smaller micro-batch or TP shard)",
    "recompute_s": "recomputation under activation checkpointing",
    "exposed_comm_s": "communication not hidden behind compute",
    "pipeline_bubble_s": "pipeline bubble",
    "offload_s": "offload: PCIe transfers and the CPU optimizer step",
    "optimizer_step_s": "CPU/optimizer step",
    "measured_shortfall_s": "the codebase's measured shortfall (a cost per micro-batch slot and layer)",
}


def gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def throughput_source(throughput: ThroughputEstimate) -> str:
    source = throughput.sources.get("step_time_s") or next(iter(throughput.sources.values()), "formula")
    library = throughput.sources.get("gpu_library_efficiency")
    if library:  # a GPU the constants were not fitted on: its factor, the source in full in --json
        source += f"; {library.split(';', 1)[0]} (sources.gpu_library_efficiency)"
    return f"throughput: {source}"


def describe_config(config: TrainingConfig) -> str:
    ac = (
        ""
        if config.activation_checkpointing is ActivationCheckpointing.NONE
        else f", {config.activation_checkpointing.value} AC"
    )
    return f"micro-batch {config.micro_batch}{ac}"


def objective_figure(item: Scored, request: PlanRequest, tokens: float) -> str:
    throughput = item.throughput
    world = item.cluster.world_size
    if request.objective is Objective.COST:
        cost = throughput.cost_usd(tokens, world)
        if cost is None:  # search() refuses a cost search without a price; kept for other callers
            return f"no cost: {item.cluster.gpu.price_source}"
        return (
            f"{format_dollars(cost, compact=False)} to train {tokens:.3g} tokens at ${throughput.price_usd_per_gpu_hour:.2f}/GPU-hour "
            f"[price: {item.cluster.gpu.price_source}]"
        )
    if request.objective is Objective.TIME_TO_TRAIN:
        days = throughput.time_to_train_s(tokens) / 86400
        return f"{days:,.2f} days to train {tokens:.3g} tokens on {counted(world, 'GPU')}"
    return f"{throughput.tokens_per_s:,.0f} tokens/s"


def plan_reasons(
    item: Scored,
    memory: MemoryEstimate,
    request: PlanRequest,
    *,
    rank: int,
    fitting: int,
    tokens: float,
    fastest: Scored,
    searched: list[ActivationCheckpointing],
) -> list[str]:
    config, cluster, throughput = item.config, item.cluster, item.throughput
    dp = config.data_parallel_size(cluster.world_size)
    reasons = [
        f"{item.layout.family} on {cluster.world_size} x {cluster.gpu.name}: {gib(memory.total)} per GPU of "
        f"{gib(memory.usable_bytes)} usable ({gib(cluster.gpu.memory_bytes)} less {request.headroom_fraction:.0%} headroom) "
        f"[{MEMORY_SOURCE}]",
        f"{throughput.tokens_per_s:,.0f} tokens/s, {throughput.tflops_per_gpu:.3g} TFLOP/s per GPU, MFU "
        f"{throughput.mfu:.0%}, step {throughput.step_time_s:.3g} s [{throughput_source(throughput)}]",
        f"micro-batch {config.micro_batch} x grad-accum {config.grad_accum} x data-parallel {dp} = "
        f"{config.micro_batch * config.grad_accum * dp} sequences of {config.seq_len} tokens per step",
    ]
    if runs_bf16_as_mixed(config):
        reasons.append(BF16_RUNS_MIXED)
    if memory.nvme_per_node_bytes:
        capacity = memory.nvme_capacity_per_node_bytes
        reasons.append(
            f"ZeRO-Infinity: {gib(memory.nvme_per_node_bytes)} per node on NVMe"
            + (f" of {gib(capacity)} (--nvme-gb, nvme_gb=)" if capacity is not None else "")
            + f"; offload takes {throughput.breakdown.offload_s:.3g} s of the step [{throughput.sources['offload_s']}]"
        )
    elif throughput.breakdown.offload_s > 0:
        reasons.append(
            f"offload to CPU memory takes {throughput.breakdown.offload_s:.3g} s of the "
            f"{throughput.step_time_s:.3g} s step [{throughput.sources['offload_s']}]"
        )
    if config.tensor_parallel > 1 or config.pipeline_parallel > 1:
        parts = []
        if config.tensor_parallel > 1:
            sp = " + sequence parallel" if config.sequence_parallel else ""
            parts.append(f"tensor parallel {config.tensor_parallel}{sp} inside a node")
        if config.pipeline_parallel > 1:
            chunks = f", {config.virtual_stages} chunks per rank" if config.virtual_stages > 1 else ""
            stage_map = config.layout.stage_layers
            chunks += f", layers per chunk {describe_stage_layers(stage_map)}" if stage_map else ""
            parts.append(f"{config.pipeline_parallel} pipeline stages ({config.pipeline_schedule.value}{chunks})")
        parts.append(f"ZeRO-{config.zero_stage} over data-parallel {dp}" if dp > 1 else "no data parallelism")
        reasons.append(", ".join(parts))
    if config.expert_parallel > 1 or not config.routing.is_default:
        reasons.append(config.routing.note(config.expert_parallel))  # what the plan assumed of the router
    if config.activation_checkpointing is not ActivationCheckpointing.NONE:
        # The search keeps a checkpointed candidate only where less recomputation does not fit.
        # The searched modes with less recomputation, which would have dominated this candidate had they fit.
        lighter = [mode for mode in DOMINATED_BY[config.activation_checkpointing] if mode in searched]
        names = ["no" if mode is ActivationCheckpointing.NONE else mode.value for mode in reversed(lighter)]
        mode = config.activation_checkpointing.value
        if names:
            listed = " or ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else names[0]
            reasons.append(
                f"{mode} activation checkpointing: micro-batch {config.micro_batch} does not fit with {listed} "
                "checkpointing, and no candidate of this family with less recomputation scores higher"
            )
        else:
            reasons.append(f"{mode} activation checkpointing, as --ac asked (no mode with less recomputation searched)")
    if ActivationCheckpointing.OP in request.activation_checkpointing and ActivationCheckpointing.OP not in searched:
        reasons.append(
            "op-level checkpointing not searched: it is counted for dense blocks without LoRA "
            '(docs/accuracy.md, "Op-level checkpointing")'
        )
    ordinal = f"{rank}{'th' if 10 <= rank % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(rank % 10, 'th')}"
    ranked = (
        f"ranked {ordinal} of {fitting} fitting candidates estimated"
        if fitting != 1
        else "the only fitting candidate estimated"  # not "1st of 1 fitting candidates"
    )
    reasons.append(f"{ranked}, by {request.objective.value}: {objective_figure(item, request, tokens)}")
    if fastest is not item:
        gap = 1 - item.score / fastest.score
        if fastest.cluster.world_size < cluster.world_size:
            why = f"and on {cluster.world_size} GPUs instead of {fastest.cluster.world_size} it finishes sooner"
        else:
            why = f"and simpler ({SIMPLICITY_RULE})"
        reasons.append(
            f"within {gap:.1%} of the best score ({fastest.layout.family}, {describe_config(fastest.config)} "
            f"on {counted(fastest.cluster.world_size, 'GPU')}), inside the estimate's error, {why}: preferred"
        )
    return reasons


def _step_basis(estimate: ThroughputEstimate) -> str:
    """What a step time rests on, as a reason can say it: a measurement, a calibration or the formula."""
    source = estimate.sources.get("step_time_s", "formula")
    kind, _, detail = source.partition(": ")
    if kind == "measured":
        return f"measured ({detail})"
    if kind == "calibration":
        return f"calibrated ({detail})"
    return "the formula's"


def _slowdown_cause(slow: ThroughputEstimate, fast: ThroughputEstimate) -> str:
    """Why the slow plan is slower: when the two step times rest on different evidence (one measured or
    calibrated, the other not, or by other records), that, since no breakdown part explains it; otherwise the
    breakdown component that grew most, per token, from the fast plan to the slow one."""
    slow_basis, fast_basis = _step_basis(slow), _step_basis(fast)
    if slow_basis != fast_basis:
        return f"its step time is {slow_basis}; the faster plan's is {fast_basis}"
    slow_tokens = slow.tokens_per_s * slow.step_time_s
    fast_tokens = fast.tokens_per_s * fast.step_time_s
    deltas = {
        name: getattr(slow.breakdown, name) / slow_tokens - getattr(fast.breakdown, name) / fast_tokens
        for name in SLOWDOWN_CAUSES
    }
    name = max(deltas, key=lambda cause: deltas[cause])
    return SLOWDOWN_CAUSES[name] if deltas[name] > 0 else "a less efficient layout"


def _per_gpu_total(spec: ModelSpec, item: Scored, implementation: str) -> int:
    """memory_on(...).total of a fitting candidate: the search's own figure where it estimated the candidate's
    memory (the bisection infers some fits without an estimate), the step peak's otherwise."""
    known = item.level.memory.get(item.batch)
    if known is not None:
        return known[0]
    return memory_total_on(spec, item.config, item.cluster, stack_memory_of(implementation))


def _miss_line(spec: ModelSpec, record: FamilyRecord, request: PlanRequest) -> str:
    assert record.smallest_miss is not None  # callers ask only for families that missed
    total, level, batch, cluster = record.smallest_miss
    config = level.config_at(batch)
    stack = stack_memory_of(request.implementation)
    memory = memory_on(spec, config, cluster, headroom_fraction=request.headroom_fraction, stack=stack)
    at = f"{describe_config(config)} on {counted(cluster.world_size, 'GPU')}"
    nvme_capacity = memory.nvme_capacity_per_node_bytes
    if memory.total <= memory.usable_bytes and nvme_capacity is not None and memory.nvme_per_node_bytes > nvme_capacity:
        return (
            f"needs {gib(memory.nvme_per_node_bytes)} NVMe per node for offload > {gib(nvme_capacity)} (--nvme-gb) "
            f"({at}) [{MEMORY_SOURCE}]"
        )
    if memory.total <= memory.usable_bytes and memory.cpu_capacity_per_node_bytes is not None:
        return (
            f"needs {gib(memory.cpu_per_node_bytes)} CPU RAM per node for offload > {gib(memory.cpu_capacity_per_node_bytes)} "
            f"({at}) [{MEMORY_SOURCE}]"
        )
    return f"{gib(memory.total)} per GPU > {gib(memory.usable_bytes)} usable, even at {at} [{MEMORY_SOURCE}]"


def family_fates(
    spec: ModelSpec,
    request: PlanRequest,
    records: dict[str, FamilyRecord],
    best: Scored | None,
    family_best: dict[str, Scored],
    not_applicable: dict[str, str],
) -> dict[str, str]:
    fates: dict[str, str] = {}
    for name, record in records.items():
        if best is not None and name == best.layout.family:
            continue
        if name in family_best:
            assert best is not None  # a family had a fitting plan, so there is a best one
            item = family_best[name]
            if item.score >= best.score * (1 - TIE_TOLERANCE):
                if best.cluster.world_size > item.cluster.world_size:
                    why = f"it uses {counted(best.cluster.world_size, 'GPU')}, not {item.cluster.world_size}, so it finishes sooner"
                elif best.layout.complexity < item.layout.complexity:
                    why = f"it is simpler ({SIMPLICITY_RULE})"
                else:
                    why = "it scores higher"
                fates[name] = (
                    f"fits, and is within {TIE_TOLERANCE:.0%} of {best.layout.family} (inside the estimate's error); "
                    f"{best.layout.family} is preferred: {why}"
                )
                continue
            ratio = best.score / item.score
            word = "costlier" if request.objective is Objective.COST else "slower"
            by = f"{(ratio - 1) * 100:.1f}%" if ratio < 1.1 else f"{ratio:.1f}x"
            cause = _slowdown_cause(item.throughput, best.throughput)
            total = _per_gpu_total(spec, item, request.implementation)
            fates[name] = (
                f"fits ({gib(total)} per GPU), but {by} {word} than {best.layout.family} "
                f"({cause}) [{throughput_source(item.throughput)}]"
            )
        elif record.smallest_miss is not None:
            fates[name] = _miss_line(spec, record, request)
        elif record.infeasible:
            fates[name] = record.infeasible
    fates.update(not_applicable)
    return fates
