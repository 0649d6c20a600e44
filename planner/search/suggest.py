"""When nothing fits: the fewest GPUs of this type that would, and which catalog GPUs fit at this count.

Every cluster suggested is one the search itself finds a plan on, for the
same request (batch, sequence length, strategies): `plan_fits` runs it. A
memory check at each layout's smallest footprint (micro-batch 1, full
activation checkpointing; memory never grows as either shrinks) only skips
clusters that cannot fit before the search is asked, so a suggestion, planned
as printed, fits (tests/test_search_suggestions.py checks that over random
requests).
"""

from __future__ import annotations

from collections.abc import Callable

from planner.evaluate import memory_on
from planner.hardware.cluster import ClusterSpec, make_cluster
from planner.hardware.gpus import load_gpu_catalog
from planner.models.spec import ModelSpec
from planner.search.batching import MICRO_BATCHES_PER_STAGE
from planner.search.candidates import precisions_for
from planner.search.layouts import enumerate_layouts
from planner.search.request import PlanRequest
from planner.training_config import ActivationCheckpointing, TrainingConfig

MAX_GPUS = 1024
DEFAULT_NODE_GPUS = 8


def smallest_footprint_fits(spec: ModelSpec, cluster: ClusterSpec, request: PlanRequest) -> bool:
    for layout in enumerate_layouts(spec, cluster, request):
        pp = layout.pipeline_parallel
        for precision in precisions_for(cluster, request):
            config = TrainingConfig(
                **layout.fields,
                seq_len=request.seq_len,
                precision=precision,
                optimizer=request.optimizer,
                attention=request.attention,
                activation_checkpointing=ActivationCheckpointing.FULL,
                lora_rank=request.lora_rank,
                qlora=request.qlora,
                micro_batch=1,
                grad_accum=MICRO_BATCHES_PER_STAGE * pp if pp > 1 else 1,  # activations in flight, as in a real run
            )
            if memory_on(spec, config, cluster, headroom_fraction=request.headroom_fraction).fits:
                return True
    return False


def _sizes(cluster: ClusterSpec) -> list[ClusterSpec]:
    """Powers of two inside one node, then whole nodes, up to MAX_GPUS.

    A single-GPU request grows into nodes of DEFAULT_NODE_GPUS, as servers come.
    Each size is built as `plan --gpus-per-node G --nodes N` builds it (catalog
    defaults for the network and host RAM), so a suggestion planned as printed
    is the cluster that was searched.
    """
    per_node = cluster.gpus_per_node if cluster.gpus_per_node > 1 else DEFAULT_NODE_GPUS
    sizes = []
    gpus = 1
    while gpus < per_node:
        sizes.append(make_cluster(cluster.gpu, gpus_per_node=gpus, nodes=1))
        gpus *= 2
    nodes = 1
    while nodes * per_node <= MAX_GPUS:
        sizes.append(make_cluster(cluster.gpu, gpus_per_node=per_node, nodes=nodes))
        nodes *= 2
    return sizes


# True when the search finds a plan for the request on this cluster.
PlanFits = Callable[[ClusterSpec], bool]


def fewest_gpus(spec: ModelSpec, cluster: ClusterSpec, request: PlanRequest, plan_fits: PlanFits) -> ClusterSpec | None:
    for candidate in _sizes(cluster):
        if candidate.world_size <= cluster.world_size or not smallest_footprint_fits(spec, candidate, request):
            continue
        if plan_fits(candidate):
            return candidate
    return None


def fitting_catalog_gpus(
    spec: ModelSpec, cluster: ClusterSpec, request: PlanRequest, plan_fits: PlanFits, limit: int = 4
) -> list[str]:
    """Catalog GPUs (datacenter first, least memory first) on which the search finds a plan at this GPU count."""
    names = []
    catalog = [gpu for gpu in load_gpu_catalog() if gpu.kind == "gpu" and gpu.name != cluster.gpu.name]
    catalog.sort(key=lambda gpu: (gpu.segment != "datacenter", gpu.memory_bytes, gpu.price_usd_per_hour))
    for gpu in catalog:
        if gpu.memory_bytes <= cluster.gpu.memory_bytes or (request.fp8 and not gpu.dense_tflops.fp8):
            continue  # smaller, or without the FP8 matmuls the request plans
        candidate = make_cluster(gpu, gpus_per_node=cluster.gpus_per_node, nodes=cluster.num_nodes)
        if smallest_footprint_fits(spec, candidate, request) and plan_fits(candidate):
            names.append(gpu.name)
            if len(names) == limit:
                break
    return names


def suggestions(spec: ModelSpec, cluster: ClusterSpec, request: PlanRequest, plan_fits: PlanFits) -> list[str]:
    lines = []
    where = f"{cluster.world_size} x {cluster.gpu.name}"
    bigger = fewest_gpus(spec, cluster, request, plan_fits)
    if bigger is not None:
        lines.append(
            f"{bigger.world_size} x {cluster.gpu.name} (--gpus-per-node {bigger.gpus_per_node} --nodes "
            f"{bigger.num_nodes}) is the fewest that fits (the search finds a plan there; memory: formula)"
        )
    elif cluster.world_size < MAX_GPUS:
        lines.append(
            f"no count of {cluster.gpu.name} from {cluster.world_size} up to {MAX_GPUS} fits this model at seq-len "
            f"{request.seq_len}"
        )
    batch = request.global_batch
    if batch and batch % cluster.world_size:
        lines.append(
            f"--global-batch {batch} is not a multiple of the {cluster.world_size} GPUs, which every purely "
            f"data-parallel layout needs: try a multiple of {cluster.world_size}"
        )
    gpus = fitting_catalog_gpus(spec, cluster, request, plan_fits)
    if gpus:
        lines.append(
            f"at {cluster.world_size} GPUs (--gpus-per-node {cluster.gpus_per_node} --nodes {cluster.num_nodes}) "
            f"these catalog GPUs fit: {', '.join(gpus)}"
        )
    if request.seq_len > 1024:
        lines.append(f"a shorter --seq-len than {request.seq_len} shrinks activations")
    if not request.lora_rank:
        lines.append("fine-tuning with --lora-rank (or --qlora) trains a fraction of the weights")
    if not lines:
        lines.append(f"nothing fits on {where}")
    return lines
