"""Throughput of one training configuration: step time, tokens/s, MFU/HFU, cost.

step = micro-batches x (forward + backward + recompute on the busiest stage)
       + exposed communication + pipeline bubble + offload + optimizer step.

Compute comes from the shape-aware kernel model (compute.py), communication
from α–β collectives on the links each group crosses (communication.py), the
bubble from (p-1)/(m·v) (Narayanan et al. 2021). Pure Python and cached per
spec and cluster: the search calls this thousands of times.
"""

from __future__ import annotations

from ..cluster import ClusterSpec
from ..flops import ModelShape, model_shape, sequence_flops
from ..gpu_catalog import pcie_bandwidth_GBps_per_direction
from ..memory.arch_traits import arch_traits
from ..model_spec import ModelSpec
from ..training_config import TrainingConfig
from .collectives import Links, cluster_links
from .communication import step_communication
from .compute import stage_compute
from .constants import CALIBRATION_SOURCE, CONSTANTS, ThroughputConstants, architecture_efficiency
from .kernels import Device
from .result import StepTimeBreakdown, ThroughputEstimate

SOURCES = {
    "model_flops": "formula: 6·N_matmul·s + 12·L·s²·h_q per sequence (Megatron/Korthikanti Eq. 7; planner/flops.py)",
    "hardware_flops": "formula: model FLOPs + one forward of each checkpointed block (Megatron Eq. 3)",
    "compute_s": f"formula: shape-aware matmul roofline + attention + element-wise passes; {CALIBRATION_SOURCE}; "
    "other GPU generations scaled by assumed library-efficiency factors (planner/throughput/constants.py)",
    "exposed_comm_s": "formula: α–β ring/tree collectives on the links each group crosses, overlap per implementation; "
    "link efficiency and latencies assumed (planner/throughput/constants.py, planner/cluster.py)",
    "pipeline_bubble_s": "formula: (p-1)/(m·v) of the pipelined compute (Narayanan et al. 2021)",
    "offload_s": "formula: PCIe transfer + CPU Adam at an assumed rate (planner/throughput/constants.py)",
    "price_usd_per_gpu_hour": "catalog price or user override (planner/catalog/gpus.json)",
}

_shapes: dict[int, tuple[ModelSpec, ModelShape, bool]] = {}
_hardware: dict[tuple, tuple[ClusterSpec, Device, Links, float]] = {}


def _shape_of(spec: ModelSpec) -> tuple[ModelShape, bool]:
    cached = _shapes.get(id(spec))
    if cached is None or cached[0] is not spec:
        cached = (spec, model_shape(spec), arch_traits(spec).fused_attention)
        if len(_shapes) > 256:
            _shapes.clear()
        _shapes[id(spec)] = cached
    return cached[1], cached[2]


def _hardware_of(cluster: ClusterSpec, config: TrainingConfig, k: ThroughputConstants) -> tuple[Device, Links, float]:
    """(device for the compute dtype, links, PCIe bytes/s) of a cluster, cached by identity."""
    key = (id(cluster), config.precision, id(k))
    cached = _hardware.get(key)
    if cached is None or cached[0] is not cluster:
        gpu = cluster.gpu
        peak = gpu.peak_tflops(config.precision.compute_dtype) * 1e12
        matmul_factor, attention_factor = architecture_efficiency(gpu.architecture)
        device = Device(
            peak_flops=peak,
            matmul_flops=peak * matmul_factor,
            attention_flops=peak * attention_factor,
            memory_Bps=gpu.memory_bandwidth_GBps * 1e9,
            element_bytes=4 if config.precision.value == "fp32" else 2,
        )
        pcie_Bps = pcie_bandwidth_GBps_per_direction(gpu.pcie_generation or 3) * 1e9 * k.link_efficiency
        cached = (cluster, device, cluster_links(cluster, k.link_efficiency), pcie_Bps)
        if len(_hardware) > 256:
            _hardware.clear()
        _hardware[key] = cached
    return cached[1], cached[2], cached[3]


def _construct(model: type, values: dict):
    """A validated-by-construction pydantic instance without re-validation: the search
    builds thousands of these, and model_construct alone costs more than the model."""
    instance = model.__new__(model)
    object.__setattr__(instance, "__dict__", values)
    object.__setattr__(instance, "__pydantic_fields_set__", set(values))
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(instance, "__pydantic_private__", None)
    return instance


def estimate_throughput(
    spec: ModelSpec, config: TrainingConfig, cluster: ClusterSpec, *, constants: ThroughputConstants = CONSTANTS
) -> ThroughputEstimate:
    k = constants
    shape, fused_attention = _shape_of(spec)
    device, links, pcie_Bps = _hardware_of(cluster, config, k)
    peak = device.peak_flops
    world = cluster.gpus_per_node * cluster.num_nodes
    stage = stage_compute(shape, config, device, k, fused_attention=fused_attention)
    comm = step_communication(
        shape, config, stage, links,
        world_size=world, pcie_Bps=pcie_Bps, memory_Bps=device.memory_Bps, k=k,
    )

    accum = config.grad_accum
    pp, virtual = config.pipeline_parallel, config.virtual_stages
    bubble = (pp - 1) / virtual * stage.total_s if pp > 1 else 0.0
    compute = accum * (stage.forward_s + stage.backward_s)
    recompute = accum * stage.recompute_s
    step = compute + recompute + comm.exposed_s + bubble + comm.offload_s + comm.optimizer_step_s

    dp = max(world // config.model_parallel_size, 1)
    global_batch = config.micro_batch * accum * dp
    flops = sequence_flops(shape, config)
    per_gpu_model = flops.model * global_batch / world / step
    per_gpu_hardware = flops.hardware * global_batch / world / step
    breakdown = _construct(StepTimeBreakdown, dict(
        compute_s=compute,
        recompute_s=recompute,
        data_parallel_comm_s=comm.data_parallel_s,
        tensor_parallel_comm_s=comm.tensor_parallel_s + comm.expert_parallel_s,
        pipeline_p2p_s=comm.pipeline_p2p_s,
        exposed_comm_s=comm.exposed_s,
        pipeline_bubble_s=bubble,
        offload_s=comm.offload_s,
        optimizer_step_s=comm.optimizer_step_s,
    ))
    return _construct(ThroughputEstimate, dict(
        step_time_s=step,
        tokens_per_s=global_batch * config.seq_len / step,
        samples_per_s=global_batch / step,
        tflops_per_gpu=per_gpu_model / 1e12,
        mfu=per_gpu_model / peak,
        hfu=per_gpu_hardware / peak,
        global_batch=global_batch,
        breakdown=breakdown,
        price_usd_per_gpu_hour=cluster.gpu.price_usd_per_hour,
        sources=dict(SOURCES),
        notes=[],
    ))
