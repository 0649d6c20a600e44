"""When nothing fits: the fewest GPUs of this type that would, and which catalog GPUs fit at this count; and for a
global batch that does not divide over the GPUs (smaller than their count, say), why, and the totals that fit; on
a node given no NVMe, the NVMe that ZeRO-Infinity's offload would fit these GPUs with.

Every cluster suggested is one the search itself finds a plan on, for the
same request (batch, sequence length, strategies): `plan_fits` runs it. A
memory check at each layout's smallest footprint (micro-batch 1, full
activation checkpointing; memory never grows as either shrinks) only skips
clusters that cannot fit before the search is asked, so a suggestion, planned
as printed, fits (tests/test_search_suggestions.py checks that over random
requests).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from planner.evaluate import memory_on, stack_memory_of
from planner.hardware.cluster import ClusterSpec, make_cluster
from planner.hardware.gpus import GpuSpec, load_gpu_catalog
from planner.hardware.memory_cap import capped_like, gpu_label
from planner.models.spec import ModelSpec
from planner.search.batching import MICRO_BATCHES_PER_STAGE
from planner.search.candidates import precisions_for
from planner.search.layouts import enumerate_layouts
from planner.search.request import PlanRequest
from planner.training_config import ActivationCheckpointing, TrainingConfig
from planner.units import GIB, counted

MAX_GPUS = 1024
DEFAULT_NODE_GPUS = 8


@dataclass(frozen=True)
class SuggestionFlags:
    """How the asking command spells what a suggestion changes: a suggestion names only flags that command has
    (the seed CLI has --gpu-count, not --gpus-per-node). None: the command cannot change it, so nothing is said."""

    cluster: Callable[[ClusterSpec], str]  # the flags that ask for this cluster
    global_batch: str | None = "--global-batch"
    lora: str | None = "--lora-rank (or --qlora)"
    strategies: str | None = "--strategies"
    seq_len: str = "--seq-len"
    nvme: str | None = "--nvme-gb"  # NVMe per node (GiB), for ZeRO-Infinity's offload
    cluster_of: Callable[[GpuSpec, int], ClusterSpec] | None = None  # how it builds N GPUs (None: as `plan` does)


def stated_host_ram_gib(cluster: ClusterSpec) -> float | None:
    """The host RAM per node the user gave (--cpu-ram-gb), not the shape's default: a suggestion of another GPU count
    keeps the user's nodes' RAM, so an offloaded plan is not promised on RAM they lack. None on the cpu device, whose
    RAM is the host's whatever the count, and where the RAM was the shape's default."""
    if cluster.gpu.kind == "cpu" or not cluster.cpu_ram_stated:
        return None
    return cluster.cpu_ram_per_node_bytes / GIB


def _plan_cluster(cluster: ClusterSpec) -> str:
    ram = stated_host_ram_gib(cluster)
    return f"--gpus-per-node {cluster.gpus_per_node} --nodes {cluster.num_nodes}" + (
        f" --cpu-ram-gb {ram:g}" if ram is not None else ""
    )


PLAN_FLAGS = SuggestionFlags(cluster=_plan_cluster)  # `hardware-selector plan`


def smallest_footprint_fits(spec: ModelSpec, cluster: ClusterSpec, request: PlanRequest) -> bool:
    for layout in enumerate_layouts(spec, cluster, request):
        pp = layout.pipeline_parallel
        for precision in precisions_for(cluster, request):
            config = TrainingConfig(
                **{**layout.fields, "precision": layout.precision_at(precision)},
                seq_len=request.seq_len,
                optimizer=request.optimizer,
                attention=request.attention,
                activation_checkpointing=ActivationCheckpointing.FULL,
                lora_rank=request.lora_rank,
                qlora=request.qlora,
                micro_batch=1,
                grad_accum=MICRO_BATCHES_PER_STAGE * pp if pp > 1 else 1,  # activations in flight, as in a real run
            )
            stack = stack_memory_of(request.implementation)
            if memory_on(spec, config, cluster, headroom_fraction=request.headroom_fraction, stack=stack).fits:
                return True
    return False


def _sizes(cluster: ClusterSpec, flags: SuggestionFlags) -> list[ClusterSpec]:
    """Powers of two inside one node, then whole nodes, up to MAX_GPUS.

    A single-GPU request grows into nodes of DEFAULT_NODE_GPUS, as servers come.
    Each size is built as `plan --gpus-per-node G --nodes N` builds it (catalog
    defaults for the network and host RAM), or as the asking command builds a count
    (flags.cluster_of), so a suggestion planned as printed is the cluster that was searched.
    """
    if flags.cluster_of is not None:
        return [flags.cluster_of(cluster.gpu, 1 << power) for power in range(MAX_GPUS.bit_length())]
    per_node = cluster.gpus_per_node if cluster.gpus_per_node > 1 else DEFAULT_NODE_GPUS
    ram = stated_host_ram_gib(cluster)
    sizes = []
    gpus = 1
    while gpus < per_node:
        sizes.append(make_cluster(cluster.gpu, gpus_per_node=gpus, nodes=1, cpu_ram_gb=ram))
        gpus *= 2
    nodes = 1
    while nodes * per_node <= MAX_GPUS:
        sizes.append(make_cluster(cluster.gpu, gpus_per_node=per_node, nodes=nodes, cpu_ram_gb=ram))
        nodes *= 2
    return sizes


# True when the search finds a plan for the request on this cluster; keywords replace fields of the request as the
# user stated it (global_batch=8: the same request at a total of 8 sequences).
PlanFits = Callable[..., bool]


def fewest_gpus(
    spec: ModelSpec,
    cluster: ClusterSpec,
    request: PlanRequest,
    plan_fits: PlanFits,
    flags: SuggestionFlags = PLAN_FLAGS,
    *,
    above: int = 0,
) -> ClusterSpec | None:
    """The fewest GPUs of this type, of the counts _sizes tries (other than this cluster's) and more than `above`,
    on which the search finds a plan. Smaller counts are tried too: a count can fail for a batch that does not
    split over it, not memory, while fewer GPUs fit (6 CPUs and a global batch of 8 fail where 4 fit)."""
    for candidate in _sizes(cluster, flags):
        if candidate.world_size == cluster.world_size or candidate.world_size <= above:
            continue
        if smallest_footprint_fits(spec, candidate, request) and plan_fits(candidate):
            return candidate
    return None


def fitting_catalog_gpus(
    spec: ModelSpec, cluster: ClusterSpec, request: PlanRequest, plan_fits: PlanFits, limit: int = 4
) -> list[str]:
    """Catalog GPUs (datacenter first, least memory first) on which the search finds a plan at this GPU count."""
    names = []
    catalog = [gpu for gpu in load_gpu_catalog() if gpu.kind == "gpu" and gpu.name != cluster.gpu.name]
    catalog.sort(key=lambda gpu: (gpu.segment != "datacenter", gpu.memory_bytes, gpu.price_usd_per_hour or math.inf))
    for gpu in (capped_like(entry, cluster.gpu) for entry in catalog):  # under the request's memory cap, if any
        if gpu.memory_bytes <= cluster.gpu.memory_bytes or (request.fp8 and not gpu.dense_tflops.fp8):
            continue  # smaller, or without the FP8 matmuls the request plans
        candidate = make_cluster(
            gpu, gpus_per_node=cluster.gpus_per_node, nodes=cluster.num_nodes, cpu_ram_gb=stated_host_ram_gib(cluster)
        )
        if smallest_footprint_fits(spec, candidate, request) and plan_fits(candidate):
            names.append(gpu.name)
            if len(names) == limit:
                break
    return names


NVME_SIZES_GIB = (1024, 2048, 4096, 8192, 16384)  # per node, as nodes carry NVMe (TB-class drives)


def nvme_line(cluster: ClusterSpec, request: PlanRequest, plan_fits: PlanFits, flags: SuggestionFlags) -> str | None:
    """A cluster given no NVMe: the smallest of NVME_SIZES_GIB per node on which the search finds a plan on these
    GPUs (ZeRO-Infinity offloads to it), said as the asking command sets it; None where none does or none may."""
    deepspeed = {"deepspeed", "zero3"} & set(request.strategies)
    if not flags.nvme or cluster.nvme_per_node_bytes or not request.allow_offload or not deepspeed:
        return None
    for size in NVME_SIZES_GIB:
        if plan_fits(cluster.model_copy(update={"nvme_per_node_bytes": size * GIB})):
            given = f"{flags.nvme}={size}" if flags.nvme.isidentifier() else f"{flags.nvme} {size}"
            return f"{given} (NVMe on each node) fits on {cluster.world_size} x {gpu_label(cluster.gpu)}: ZeRO-Infinity offloads to it"
    return None


def _at_least(batch: int, gpus: int) -> int:
    """The smallest multiple of `gpus` that is `batch` or more: a total every GPU gets a share of."""
    return -(-batch // gpus) * gpus


def batch_lines(
    spec: ModelSpec,
    cluster: ClusterSpec,
    request: PlanRequest,
    plan_fits: PlanFits,
    flags: SuggestionFlags = PLAN_FLAGS,
) -> list[str]:
    """A stated total that does not divide over the GPUs: why, and the totals that fit, each one searched: on these
    GPUs, and on the fewest GPUs of this type (every GPU given at least one sequence of the batch or more)."""
    batch, world, gpu, _flags = request.global_batch, cluster.world_size, gpu_label(cluster.gpu), flags.cluster
    name = flags.global_batch
    assert batch is not None
    if batch < world:
        lines = [
            f"{name} {batch} is below the {world} GPUs: a global batch smaller than the GPU count leaves "
            f"{world - batch} GPUs without data unless tensor or pipeline parallelism splits the model over them"
            + (
                ""
                if "engine" in request.strategies or not flags.strategies
                else f" (our engine: add engine to {flags.strategies})"
            )
        ]
    elif batch % world:
        lines = [
            f"{name} {batch} is not a multiple of the {world} GPUs, which every purely data-parallel layout "
            f"needs: try a multiple of {world}"
        ]
    else:  # no larger count fits this total: more GPUs than sequences would leave some without data
        lines = [
            f"more GPUs than the {batch} sequences of {name} {batch} leave some without data unless tensor "
            "or pipeline parallelism splits the model over them"
        ]
    here = _at_least(batch, world)
    if here != batch and plan_fits(cluster, global_batch=here):
        lines.append(f"{name} {here} on {world} x {gpu} ({_flags(cluster)}) fits: these GPUs, each given data")
    for candidate in _sizes(cluster, flags):
        total = _at_least(batch, candidate.world_size)
        if candidate.world_size == world or not smallest_footprint_fits(spec, candidate, request):
            continue
        if plan_fits(candidate, global_batch=total):
            lines.append(
                f"{name} {total} on {candidate.world_size} x {gpu} ({_flags(candidate)}) fits: the fewest "
                f"{gpu} that train {batch} or more sequences a step, each GPU given data"
            )
            break
    return lines


def suggestions(
    spec: ModelSpec,
    cluster: ClusterSpec,
    request: PlanRequest,
    plan_fits: PlanFits,
    *,
    stated_total: bool = False,
    flags: SuggestionFlags = PLAN_FLAGS,
) -> list[str]:
    """`stated_total`: the user gave the global batch (a total that stays as the GPU count changes), not a
    per-GPU batch or none. `flags`: the asking command's spelling of each change."""
    lines, _flags = [], flags.cluster
    label = gpu_label(cluster.gpu)  # "V100-16GB capped at 2 GiB" under a max_memory_gb cap
    where = f"{cluster.world_size} x {label}"
    fewest = fewest_gpus(spec, cluster, request, plan_fits, flags)
    batch = request.global_batch
    if fewest is not None:
        line = f"{fewest.world_size} x {label} ({_flags(fewest)}) is the fewest that fits"
        if fewest.world_size < cluster.world_size:  # fewer fit where these do not: say the way up too, and why
            up = fewest_gpus(spec, cluster, request, plan_fits, flags, above=cluster.world_size)
            if up is not None:
                line += f", {up.world_size} x {label} ({_flags(up)}) the next count up"
        line += f" (the search finds a plan {'on each' if ', ' in line else 'there'}; memory: formula)"
        if fewest.world_size < cluster.world_size and flags.global_batch and batch and batch % cluster.world_size:
            line += (
                f"; {cluster.world_size} GPUs do not split {flags.global_batch} {batch} evenly, which every "
                "purely data-parallel layout needs"
            )
        lines.append(line)
    elif cluster.world_size < MAX_GPUS:
        held = f"{flags.global_batch} {batch} and " if stated_total and flags.global_batch else ""
        lines.append(
            f"no count of {label} from {cluster.world_size} up to {MAX_GPUS} fits this model at "
            f"{held}seq-len {request.seq_len}"
        )
    if (
        flags.global_batch
        and batch
        and (batch % cluster.world_size or (stated_total and fewest is None and batch < MAX_GPUS))
    ):
        lines += batch_lines(spec, cluster, request, plan_fits, flags)
    gpus = fitting_catalog_gpus(spec, cluster, request, plan_fits)
    if gpus:
        lines.append(
            f"at {counted(cluster.world_size, 'GPU')} ({_flags(cluster)}) these catalog GPUs fit: {', '.join(gpus)}"
        )
    nvme = nvme_line(cluster, request, plan_fits, flags)
    lines += [nvme] if nvme else []
    if request.seq_len > 1024:
        lines.append(f"a shorter {flags.seq_len} than {request.seq_len} shrinks activations")
    if not request.lora_rank and flags.lora:
        lines.append(f"fine-tuning with {flags.lora} trains a fraction of the weights")
    if not lines:
        lines.append(f"nothing fits on {where}")
    return lines
