"""When nothing fits: the fewest GPUs of this type that would, and which catalog GPUs fit at this count.

The check is memory only, at each layout's smallest footprint: micro-batch 1
with full activation checkpointing (memory never grows as either shrinks), so
a "fits" here means some plan exists; the global batch may need adjusting.
"""

from __future__ import annotations

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
    """
    per_node = cluster.gpus_per_node if cluster.gpus_per_node > 1 else DEFAULT_NODE_GPUS
    ram_per_gpu = cluster.cpu_ram_per_node_bytes / cluster.gpus_per_node  # host RAM comes with the GPUs

    def sized(gpus_per_node: int, nodes: int) -> ClusterSpec:
        update = {
            "gpus_per_node": gpus_per_node,
            "num_nodes": nodes,
            "cpu_ram_per_node_bytes": int(ram_per_gpu * gpus_per_node),
        }
        return cluster.model_copy(update=update)

    sizes = []
    gpus = 1
    while gpus < per_node:
        sizes.append(sized(gpus, 1))
        gpus *= 2
    nodes = 1
    while nodes * per_node <= MAX_GPUS:
        sizes.append(sized(per_node, nodes))
        nodes *= 2
    return sizes


def fewest_gpus(spec: ModelSpec, cluster: ClusterSpec, request: PlanRequest) -> ClusterSpec | None:
    for candidate in _sizes(cluster):
        if candidate.world_size > cluster.world_size and smallest_footprint_fits(spec, candidate, request):
            return candidate
    return None


def fitting_catalog_gpus(spec: ModelSpec, cluster: ClusterSpec, request: PlanRequest, limit: int = 4) -> list[str]:
    """Catalog GPUs (datacenter first, least memory first) on which some plan fits at this GPU count."""
    names = []
    catalog = [gpu for gpu in load_gpu_catalog() if gpu.kind == "gpu" and gpu.name != cluster.gpu.name]
    catalog.sort(key=lambda gpu: (gpu.segment != "datacenter", gpu.memory_bytes, gpu.price_usd_per_hour))
    for gpu in catalog:
        if gpu.memory_bytes <= cluster.gpu.memory_bytes:
            continue
        candidate = make_cluster(gpu, gpus_per_node=cluster.gpus_per_node, nodes=cluster.num_nodes)
        if smallest_footprint_fits(spec, candidate, request):
            names.append(gpu.name)
            if len(names) == limit:
                break
    return names


def suggestions(spec: ModelSpec, cluster: ClusterSpec, request: PlanRequest) -> list[str]:
    lines = []
    where = f"{cluster.world_size} x {cluster.gpu.name}"
    bigger = fewest_gpus(spec, cluster, request)
    if bigger is not None:
        layout = (
            f"{bigger.num_nodes} node(s) of {bigger.gpus_per_node}"
            if bigger.num_nodes > 1
            else f"{bigger.gpus_per_node} on one node"
        )
        lines.append(
            f"{bigger.world_size} x {cluster.gpu.name} ({layout}) is the fewest that fits "
            f"(micro-batch 1, full activation checkpointing; memory: formula)"
        )
    else:
        lines.append(f"no count of {cluster.gpu.name} up to {MAX_GPUS} fits this model at seq-len {request.seq_len}")
    gpus = fitting_catalog_gpus(spec, cluster, request)
    if gpus:
        lines.append(f"at {cluster.world_size} GPUs these catalog GPUs fit: {', '.join(gpus)}")
    if request.seq_len > 1024:
        lines.append(f"a shorter --seq-len than {request.seq_len} shrinks activations")
    if not request.lora_rank:
        lines.append("fine-tuning with --lora-rank (or --qlora) trains a fraction of the weights")
    if not lines:
        lines.append(f"nothing fits on {where}")
    return lines
