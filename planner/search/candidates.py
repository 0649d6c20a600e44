"""Evaluate every candidate of every layout: memory first, throughput for what fits.

Two exact prunings keep the estimator calls far below the candidate count:
- per-GPU memory never falls as the micro-batch grows while gradient
  accumulation stays above 1 (activations grow with it, nothing shrinks), so
  once a micro-batch does not fit, the larger ones with accumulation do not
  either; the accumulation-free one is still evaluated, since it drops the
  accumulated-gradient buffer;
- activation checkpointing only adds recomputation, so a candidate that fits
  without it (or with less of it) dominates the same candidate with more:
  none dominates every mode, and selective and op each dominate full, but
  neither dominates the other (op recomputes matmuls and element-wise ops,
  selective the attention kernel, and either can be the faster:
  checkpointing_modes.py's DOMINATED_BY).
Among the fitting micro-batches of one layout, throughput is estimated from
the largest down until it stops improving (see _scan_micro_batches).
tests/test_search_pruning.py checks all three against an exhaustive evaluation.
One more rule prunes whole layouts: on a device whose memory is the host's
(the cpu device), CPU offload moves the states into the same RAM (the memory
estimate keeps them in the peak) and adds its copies to the step, so a
candidate with it never runs faster than its sibling without offload, and
needs no less memory but for one term: DeepSpeed's ZeRO-2 offload reduces
gradients straight into its CPU partition, so it never holds the device-side
gradient partition (trainable x its width / dp) its sibling does. layouts.py
does not generate CPU offload there (NVMe offload, which leaves the RAM,
still is), losing at most a ZeRO-2 candidate that fits by less than that
partition. tests/test_search_pruning.py checks every such candidate against
its sibling (test_cpu_device_leaves_out_offload_and_loses_nothing).
A memory estimate costs its batch's arithmetic: the candidates of one layout and
AC level share its checks, model states, buffers and activation terms
(phases.peak_at), exact because none of those read the micro-batch or the
accumulation (but the pipeline's buffers, found per micro-batch) and the model
states do not read the AC level (tests/test_peak_line.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.hardware.cluster import ClusterSpec
from planner.memory.estimate import fit_bytes, host_fits
from planner.memory.phases import batch_peaks, peak_at
from planner.memory.runtime import runtime_for
from planner.models.spec import ModelSpec
from planner.search import config_copy
from planner.search.batching import batch_options, infeasible_batch_reason
from planner.search.checkpointing_modes import DOMINATED_BY, searched_checkpointing
from planner.search.groups import FamilyRecord, Group, Level, Scored
from planner.search.layouts import enumerate_layouts
from planner.search.request import Objective, PlanRequest, training_precision
from planner.search.strategy_layout import StrategyLayout
from planner.throughput.estimate import ThroughputPlan, candidate_step, estimate_of, throughput_plan
from planner.throughput.implementation import Implementation, implementation_named
from planner.throughput.result import ThroughputEstimate
from planner.training_config import ActivationCheckpointing, Precision, Strategy, TrainingConfig

ThroughputAdjust = Callable[[TrainingConfig, ThroughputEstimate], ThroughputEstimate]

# (layout identity, precision, AC, the request's config fields) -> (layout, its validated config).
_LAYOUT_CONFIGS: dict[tuple, tuple[StrategyLayout, TrainingConfig]] = {}
# (spec, validated config, cluster, implementation identities) -> (those four, their throughput plan).
_GROUP_PLANS: dict[
    tuple[int, int, int, int], tuple[ModelSpec, TrainingConfig, ClusterSpec, Implementation, ThroughputPlan]
] = {}


@dataclass
class Counters:
    considered: int = 0
    memory_evaluations: int = 0
    throughput_evaluations: int = 0
    pruned: int = 0
    fitting: int = 0
    throughput_skipped: int = 0


def precisions_for(cluster: ClusterSpec, request: PlanRequest) -> list[Precision]:
    """The user's precision, or the best mixed precision the GPU has (request.training_precision)."""
    return [training_precision(cluster.gpu, request.precision)]


def cluster_variants(cluster: ClusterSpec, objective: Objective) -> list[ClusterSpec]:
    """The whole cluster; for cost and time-to-train also fewer whole nodes (or GPUs of one node).

    Poor scaling can make a smaller slice cheaper, or even faster when
    communication dominates; throughput always uses every GPU.
    """
    if objective is Objective.THROUGHPUT:
        return [cluster]
    entry = _SLICES.get(id(cluster))
    if entry is None or entry[0] is not cluster:
        if len(_SLICES) >= 256:
            _SLICES.clear()
        entry = _SLICES[id(cluster)] = (cluster, _slices(cluster))  # holding the cluster keeps its id
    return [cluster, *entry[1]]


# id(cluster) -> (cluster, its slices): every search of one cluster object gets the same slice objects, which
# the caches keyed by a cluster's identity find again (hardware_of, _GROUP_PLANS) instead of building anew.
_SLICES: dict[int, tuple[ClusterSpec, tuple[ClusterSpec, ...]]] = {}


def _slices(cluster: ClusterSpec) -> tuple[ClusterSpec, ...]:
    """The fewer whole nodes (or GPUs of one node) of cluster_variants, by powers of two."""
    variants = []
    if cluster.num_nodes > 1:
        nodes = 1
        while nodes < cluster.num_nodes:
            variants.append(cluster.model_copy(update={"num_nodes": nodes}))
            nodes *= 2
    else:
        gpus = 1
        while gpus < cluster.gpus_per_node:
            variants.append(cluster.model_copy(update={"gpus_per_node": gpus}))
            gpus *= 2
    return tuple(variants)


def objective_score(throughput: ThroughputEstimate, world_size: int, objective: Objective) -> float:
    by_cost = objective is Objective.COST
    return score_of(throughput.tokens_per_s, throughput.price_usd_per_gpu_hour, world_size, by_cost)


def score_of(tokens_per_s: float, price_usd_per_gpu_hour: float | None, world_size: int, by_cost: bool) -> float:
    """objective_score from the estimate's two figures it reads; by_cost: the cost objective (tokens per
    dollar), else tokens per second (throughput and time-to-train)."""
    if by_cost:
        price = (price_usd_per_gpu_hour or 0.0) * world_size  # search() refuses a GPU without a price
        return tokens_per_s / price if price > 0 else tokens_per_s / world_size
    return tokens_per_s


class CandidateEvaluator:
    """Runs the candidates of a request whose global batch is set (see batching.resolve_global_batch)."""

    def __init__(
        self,
        spec: ModelSpec,
        request: PlanRequest,
        throughput_adjust: ThroughputAdjust | None = None,
    ) -> None:
        self.spec = spec
        self.request = request
        self.adjust = throughput_adjust
        self.families: dict[str, FamilyRecord] = {}
        self.counters = Counters()
        self._implementation = implementation_named(request.implementation)  # looked up once, not per estimate
        self._by_cost = request.objective is Objective.COST
        # What the validated configs read of the request (_base_fields), as plain values.
        self._request_fields = (
            request.seq_len,
            request.optimizer,
            request.attention,
            request.lora_rank,
            request.qlora,
            request.fp8,
            request.kernels,
            *request.routing.__dict__.values(),
        )

    def _memory(self, group: Group, level: Level, pair: tuple[int, int]) -> tuple[int, bool]:
        """(per-GPU total bytes, fits) by the memory estimator's raw fast path; same rule as MemoryEstimate.fits.
        The caches are keyed by plain values, and the candidate's own config is not built (phases.peak_at)."""
        seen = level.memory.get(pair)
        if seen is not None:
            return seen
        self.counters.memory_evaluations += 1
        cluster = group.cluster
        gpus_per_node = cluster.gpus_per_node
        runtime = runtime_for(cluster.gpu)
        peaks = level.peaks
        if peaks is None:
            world_size = gpus_per_node * cluster.num_nodes
            stack = self._implementation.stack_memory()  # what the codebase decides of it
            peaks = level.peaks = batch_peaks(self.spec, level.config, world_size, gpus_per_node, runtime, stack)
        peak = peaks.get(pair)
        if peak is None:  # the level's config at the candidate's batch, without building the candidate's config
            world_size = gpus_per_node * cluster.num_nodes
            peak = peak_at(self.spec, level.config, pair[0], pair[1], world_size, gpus_per_node, peaks, runtime)
        total, cpu_per_node, nvme_per_node = fit_bytes(peak, gpus_per_node, runtime=runtime)
        # (Nothing offloaded fits any host: a capacity is never negative.)
        fits = total <= group.usable_bytes and (
            not (cpu_per_node or nvme_per_node)
            or host_fits(cpu_per_node, nvme_per_node, cluster.cpu_ram_per_node_bytes, cluster.nvme_per_node_bytes)
        )
        seen = level.memory[pair] = total, fits
        if not fits:
            record = group.record
            if record.smallest_miss is None or total < record.smallest_miss[0]:
                # Its config is built only if the family's fate quotes it (explain.py).
                record.smallest_miss = (total, level, pair, cluster)
        return seen

    def _score(self, group: Group, level: Level, pair: tuple[int, int]) -> Scored:
        """The candidate at `level` and `pair` with estimate_throughput's figures and its score."""
        self.counters.throughput_evaluations += 1
        cluster = group.cluster
        plan = group.throughput_plan
        if plan is None:
            plan = group.throughput_plan = self._group_plan(group)
        step = candidate_step(plan, level.config, pair[0], pair[1])
        if self.adjust is None:
            if self._by_cost:
                score = score_of(step.tokens_per_s, plan.price_usd_per_gpu_hour, plan.world, True)
            else:
                score = step.tokens_per_s  # score_of's throughput score
            return Scored(group.layout, cluster, score, step, plan, level, pair)
        # Measured records replace or correct the estimate.
        estimate = self.adjust(level.config_at(pair), estimate_of(plan, step))
        score = objective_score(estimate, cluster.world_size, self.request.objective)
        return Scored(group.layout, cluster, score, step, plan, level, pair, estimate)

    def _group_plan(self, group: Group) -> ThroughputPlan:
        """throughput_plan of the group's validated config on its cluster. Found by the objects' identities first
        (the search of a cluster object meets the same configs and slices again): throughput_plan's own memo
        builds a key of the config's and the hardware's values on every call (the links' dataclass hash is
        Python code), a few microseconds per group."""
        spec, config, cluster, implementation = self.spec, group.validated, group.cluster, self._implementation
        key = (id(spec), id(config), id(cluster), id(implementation))
        entry = _GROUP_PLANS.get(key)
        if entry is not None and entry[1] is config:  # (the entry holds all four: equal ids are the same objects)
            return entry[4]
        if len(_GROUP_PLANS) >= 4096:
            _GROUP_PLANS.clear()
        plan = throughput_plan(spec, config, cluster, implementation=implementation)
        _GROUP_PLANS[key] = (spec, config, cluster, implementation, plan)  # holding them keeps their ids
        return plan

    def _family(self, name: str) -> FamilyRecord:
        record = self.families.get(name)
        if record is None:
            record = self.families[name] = FamilyRecord(name)
        return record

    def _validated_config(
        self, layout: StrategyLayout, precision: Precision, ac: ActivationCheckpointing
    ) -> TrainingConfig:
        """The layout's config at this precision and AC level, validated once per distinct value
        (config_copy.validated); the other AC levels, micro-batches and accumulations are copied in
        (planner/search/groups.py). Found by the layout's identity first (enumerate_layouts gives every search
        of a cluster shape the same layouts): cheaper than hashing the fields' nested models."""
        key = (id(layout), precision, ac, self._request_fields)
        entry = _LAYOUT_CONFIGS.get(key)
        if entry is not None and entry[0] is layout:
            return entry[1]
        if len(_LAYOUT_CONFIGS) >= 8192:
            _LAYOUT_CONFIGS.clear()
        config = config_copy.validated(self._base_fields(layout, precision, ac))
        _LAYOUT_CONFIGS[key] = (layout, config)  # holding the layout keeps its id from being reused
        return config

    def _base_fields(self, layout: StrategyLayout, precision: Precision, ac: ActivationCheckpointing) -> dict:
        request = self.request
        return {
            **layout.fields,
            "seq_len": request.seq_len,
            "precision": layout.precision_at(precision),
            "optimizer": request.optimizer,
            "attention": request.attention,
            "activation_checkpointing": ac,
            "lora_rank": request.lora_rank,
            "qlora": request.qlora,
            "fp8": request.fp8,
            "kernels": request.kernels,
            "routing": request.routing_for(layout.fields.get("strategy", Strategy.DDP)),
        }

    def run(self, cluster: ClusterSpec) -> list[Scored]:
        scored: list[Scored] = []
        request = self.request
        lora = bool(request.lora_rank or request.qlora)
        allowed_ac = searched_checkpointing(self.spec, request.activation_checkpointing, lora)
        usable = int(cluster.gpu.memory_bytes * (1 - request.headroom_fraction))
        precisions = precisions_for(cluster, request)
        world_size, global_batch = cluster.world_size, request.global_batch
        assert global_batch is not None  # search_plans resolves the batch before the candidates
        families = self.families
        for layout in enumerate_layouts(self.spec, cluster, request):
            record = families.get(layout.family) or self._family(layout.family)
            dp = world_size // layout.model_parallel
            batches = batch_options(request, global_batch, dp, layout.pipeline_parallel, layout.micro_batch_rounds)
            if not batches:
                if not record.fitting and record.smallest_miss is None:
                    record.infeasible = infeasible_batch_reason(request, global_batch, dp, layout.pipeline_parallel)
                continue
            record.infeasible = None
            for precision in precisions:
                validated = self._validated_config(layout, precision, allowed_ac[0])
                group = Group(layout, record, cluster, batches, precision, usable, validated)
                fits: dict[ActivationCheckpointing, set[int]] = {}  # micro-batches that fit, per mode
                for index, ac in enumerate(allowed_ac):
                    remaining = allowed_ac[index:]
                    # Micro-batches that fit with less recomputation (DOMINATED_BY): this mode's are dominated.
                    fitting_micros = set().union(*(fits.get(mode, set()) for mode in DOMINATED_BY[ac]))
                    if len(fitting_micros) == len(batches):
                        # Every micro-batch fit with less recomputation: this level's candidates are all dominated,
                        # decided without an estimate (what _scan_micro_batches would count for them). Common on
                        # large clusters, where one sequence per replica leaves one or two candidates.
                        self.counters.considered += len(batches)
                        self.counters.pruned += len(batches)
                        fits[ac] = fitting_micros
                        continue
                    # Nothing fit with less recomputation: if the lightest candidates do not fit
                    # either, skip the levels in between (memory never grows with more AC).
                    if (
                        index
                        and not any(fits.values())
                        and len(remaining) > 1
                        and not self._lightest_fits(group, remaining)
                    ):
                        break
                    scored += self._scan_micro_batches(group, ac, fitting_micros)
                    fits[ac] = fitting_micros
        return scored

    def _lightest_fits(self, group: Group, remaining_ac: list[ActivationCheckpointing]) -> bool:
        """False when even the lightest candidates (most recomputation, smallest micro-batch, and the
        accumulation-free one) do not fit: then no candidate at the remaining AC levels does."""
        batches = group.batches
        lightest = group.level(remaining_ac[-1])
        evaluations_before = self.counters.memory_evaluations
        lightest_pairs = [batches[0]] + ([batches[-1]] if len(batches) > 1 and batches[-1][1] == 1 else [])
        for pair in lightest_pairs:
            if self._memory(group, lightest, pair)[1]:
                return True
        candidates = len(batches) * len(remaining_ac)
        self.counters.considered += candidates
        self.counters.pruned += candidates - (self.counters.memory_evaluations - evaluations_before)
        return False

    def _scan_micro_batches(self, group: Group, ac: ActivationCheckpointing, fitting_micros: set[int]) -> list[Scored]:
        """Fitting candidates of one layout, precision and AC mode; fitting_micros gains theirs.

        Memory grows with the micro-batch while accumulation stays above 1, so the
        fitting ones form a prefix, found by bisection; the accumulation-free
        candidate (last, when a global batch is given) is evaluated on its own.
        """
        counters = self.counters
        batches = group.batches
        level = group.level(ac)
        counters.considered += len(batches)
        open_batches = [pair for pair in batches if pair[0] not in fitting_micros] if fitting_micros else batches[:]
        accumulation_free = None
        if open_batches and open_batches[-1][1] == 1:
            accumulation_free = open_batches.pop()

        memory = self._memory
        evaluations_before = counters.memory_evaluations
        # Check both ends first: often all or none of them fit, which settles it in one or two calls.
        low, high = 0, len(open_batches)  # open_batches[:low] fit, open_batches[high:] do not
        if high:
            if not memory(group, level, open_batches[0])[1]:
                high = 0
            else:
                low = 1
                if memory(group, level, open_batches[-1])[1]:  # (one candidate: its end is its start, estimated once)
                    low = high
                else:
                    high -= 1
                while low < high:
                    middle = (low + high) // 2
                    if memory(group, level, open_batches[middle])[1]:
                        low = middle + 1
                    else:
                        high = middle
        fitting = open_batches[:low]
        if accumulation_free is not None and memory(group, level, accumulation_free)[1]:
            fitting.append(accumulation_free)
        counters.pruned += len(batches) - (counters.memory_evaluations - evaluations_before)

        counters.fitting += len(fitting)
        for pair in fitting:
            fitting_micros.add(pair[0])
        record = group.record
        # Throughput rises with the micro-batch at a fixed global batch (fuller matmuls,
        # fewer per-micro-batch gathers) until a pipeline's bubble grows: walk down from
        # the largest fitting micro-batch and stop at the first one slower than the last.
        scored: list[Scored] = []
        for pair in reversed(fitting):
            item = self._score(group, level, pair)
            record.fitting.append(item)
            scored.append(item)
            if len(scored) > 1 and item.score < scored[-2].score:
                break
        counters.throughput_skipped += len(fitting) - len(scored)
        return scored
