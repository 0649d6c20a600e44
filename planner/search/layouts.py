"""The ways to lay a model out on a cluster: strategy, sharding and offload, and the engine's TP x PP x DP.

The DDP, FSDP and DeepSpeed ZeRO layouts are listed here; the engine's come from engine_layouts.py, and what a
layout is from strategy_layout.py. Every layout produced already satisfies TrainingConfig's constraints for this
model and cluster, so the search can build configs without re-checking them.
"""

from __future__ import annotations

from planner.hardware.cluster import ClusterSpec
from planner.models.spec import ModelSpec
from planner.search.engine_layouts import engine_applicability, engine_layouts
from planner.search.request import FSDP_SHARDING_KINDS, ZERO_STAGE_KINDS, PlanRequest
from planner.search.strategy_layout import SIMPLICITY, StrategyLayout, make_layout
from planner.throughput.implementation import runs_kernels_on_split_models
from planner.training_config import FsdpSharding, KernelChoice, Offload, Precision, Strategy


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
        layouts.append(make_layout(SIMPLICITY[f"fsdp-{sharding.value}"], base))
        if allow_offload and sharding in (FsdpSharding.FULL, FsdpSharding.HYBRID) and not cluster.gpu.memory_is_host:
            offload = {**base, "offload_params": Offload.CPU, "offload_optimizer": Offload.CPU}
            layouts.append(make_layout(SIMPLICITY["fsdp-offload"], offload))
    return layouts


def _deepspeed_layouts(cluster: ClusterSpec, allow_offload: bool, zeropp: bool = False) -> list[StrategyLayout]:
    layouts = []
    for stage in (1, 2, 3):
        base = {"strategy": Strategy.DEEPSPEED, "zero_stage": stage}
        layouts.append(make_layout(SIMPLICITY[f"zero{stage}"], base))
        if stage == 3 and zeropp and cluster.gpu.kind != "cpu":  # asked for (--zeropp): ZeRO++ beside ZeRO-3,
            # in fp16 whatever the others run: its int4 gradient kernel reads fp16 (planner/throughput/zeropp.py)
            fields = {**base, "zeropp": True, "precision": Precision.FP16_MIXED}
            layouts.append(make_layout(SIMPLICITY["zero3-zeropp"], fields))
        if not allow_offload:
            continue
        # ZeRO-Offload (Ren et al. 2021) is built on stage 2; a device whose memory is the host's gains nothing by
        # it (the states stay in the same RAM, planner/memory/estimate.py), so only NVMe offload is tried there.
        if stage >= 2 and not cluster.gpu.memory_is_host:
            layouts.append(
                make_layout(SIMPLICITY[f"zero{stage}-offload-optimizer"], {**base, "offload_optimizer": Offload.CPU})
            )
        if stage == 3:
            if not cluster.gpu.memory_is_host:
                both = {**base, "offload_optimizer": Offload.CPU, "offload_params": Offload.CPU}
                layouts.append(make_layout(SIMPLICITY["zero3-offload-all"], both))
            if cluster.nvme_per_node_bytes:
                nvme = {**base, "offload_optimizer": Offload.NVME, "offload_params": Offload.NVME}
                layouts.append(make_layout(SIMPLICITY["zero3-offload-nvme"], nvme))
    return layouts


# (spec, what enumerate_layouts reads of the cluster and the request) -> (spec, its layouts).
_LAYOUTS: dict[tuple, tuple[ModelSpec, tuple[StrategyLayout, ...]]] = {}


def enumerate_layouts(spec: ModelSpec, cluster: ClusterSpec, request: PlanRequest) -> list[StrategyLayout]:
    """Every layout the request allows for this model on this cluster. Memoised by the values it reads (the
    spec, the cluster's GPUs per node, nodes, whether it has NVMe and its device's kind, the request's strategy
    fields): every search of the model on a cluster of that shape gets the same layout objects, which the
    search's own caches key on (planner/search/candidates.py)."""
    key = (
        id(spec),
        cluster.gpus_per_node,
        cluster.num_nodes,
        bool(cluster.nvme_per_node_bytes),
        cluster.gpu.kind,  # the cpu device: no FSDP1 shardings, no CPU offload
        request.strategies,
        request.allow_offload,
        request.lora_rank,
        request.qlora,
        request.seq_len,
        request.compression,
        request.zeropp,
        request.kernels,
        request.implementation,
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
        layouts.append(make_layout(SIMPLICITY["ddp"], {"strategy": Strategy.DDP}))
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
            for layout in _deepspeed_layouts(cluster, request.allow_offload, request.zeropp)
            if "deepspeed" in wanted or layout.fields["zero_stage"] in stages
        ]
    if "engine" in wanted and engine_applicability(spec) is None and not request.lora_rank:
        layouts += engine_layouts(spec, cluster, request.seq_len, request.compression)
    if request.kernels is not KernelChoice.EAGER and not runs_kernels_on_split_models(request.implementation):
        # Our engine compiles (or patches) whole replicas only: it refuses a split model under these kernels.
        layouts = [kept for kept in layouts if not splits_the_model(kept)]
    if request.qlora:
        # The 4-bit base cannot be partitioned by ZeRO-3.
        layouts = [
            kept
            for kept in layouts
            if not (kept.fields.get("strategy") is Strategy.DEEPSPEED and kept.fields.get("zero_stage") == 3)
        ]
    return layouts


def splits_the_model(layout: StrategyLayout) -> bool:
    """A tensor or pipeline split (which our engine refuses under compiled or patched kernels)."""
    dims = layout.fields.get("layout")
    return dims is not None and (dims.tp > 1 or dims.pp > 1)
