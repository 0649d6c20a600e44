"""Throughput of one training configuration: step time, tokens/s, MFU/HFU, cost.

step = micro-batches x (forward + backward + recompute on the busiest stage)
       + exposed communication + pipeline bubble + offload + optimizer step.

Compute comes from the shape-aware kernel model (compute.py), communication
from α–β collectives on the links each group crosses (communication.py), the
bubble from (p-1)/(m·v) (Narayanan et al. 2021). Pure Python and cached per
spec and cluster: the search calls this thousands of times.
"""

from __future__ import annotations

from typing import Any

from planner.errors import UserInputError
from planner.hardware.cluster import ClusterSpec
from planner.hardware.gpus import pcie_bandwidth_GBps_per_direction
from planner.memory.arch_traits import arch_traits
from planner.models.flops import ModelShape, SequenceFlops, model_shape, sequence_flops
from planner.models.spec import ModelSpec
from planner.throughput.collectives import Links, cluster_links
from planner.throughput.communication import step_communication
from planner.throughput.compressed_reduction import compression_sources
from planner.throughput.compute import StageCompute, stage_compute
from planner.throughput.constants import CALIBRATION_SOURCE, CONSTANTS, ThroughputConstants, architecture_efficiency
from planner.throughput.implementation import OUR_STRATEGIES, Implementation
from planner.throughput.kernel_stack import STACK_SOURCES, KernelStack
from planner.throughput.kernels import Device
from planner.throughput.result import StepTimeBreakdown, ThroughputEstimate
from planner.training_config import GradientCompression, KernelChoice, Offload, Precision, TrainingConfig

_COMPUTE = (
    f"formula: shape-aware matmul roofline + fused attention + element-wise passes; {CALIBRATION_SOURCE}; "
    "non-Ampere GPUs scaled by assumed library-efficiency factors (planner/throughput/constants.py)"
)
_COMM = (
    "formula: α–β ring/tree collectives on the links each group crosses, overlapped as each implementation does; "
    "link efficiency and latencies assumed (planner/throughput/constants.py, planner/hardware/cluster.py)"
)
_STEP = "formula: micro-batches x (forward + backward + recompute) + exposed communication + bubble + offload + optimizer step"
_MODEL_FLOPS = "6·N_matmul·s + 12·L·s²·h_q FLOPs per sequence (Korthikanti Eq. 7, planner/models/flops.py)"
SOURCES = {
    "step_time_s": f"{_STEP}; compute {CALIBRATION_SOURCE}",
    "tokens_per_s": "formula: global batch x sequence length / step time",
    "samples_per_s": "formula: global batch / step time",
    "tflops_per_gpu": f"formula: {_MODEL_FLOPS} x sequences per second per GPU",
    "mfu": f"formula: {_MODEL_FLOPS} / step time / dense peak of the compute dtype (GPU catalog)",
    "hfu": "formula: model FLOPs + one forward of each checkpointed block (Megatron Eq. 3) / step time / dense peak",
    "compute_s": _COMPUTE,
    "recompute_s": _COMPUTE,
    "exposed_comm_s": _COMM,
    "data_parallel_comm_s": _COMM,
    "tensor_parallel_comm_s": _COMM,
    "pipeline_p2p_s": _COMM,
    "pipeline_bubble_s": "formula: (p-1)/(m·v) of the pipelined compute (Narayanan et al. 2021)",
    "offload_s": "formula: PCIe transfers + CPU Adam at an assumed rate (planner/throughput/constants.py)",
    "optimizer_step_s": "formula: HBM bytes per parameter of the optimizer update / memory bandwidth (assumed bytes)",
    "price_usd_per_gpu_hour": "the price catalog's cheapest on-demand price for the GPU (planner/catalog/prices.yaml), or the user's override (--price, make_cluster(price_per_hour=...)); none where neither gives one",
}
# The compute figures also name the kernel stack they assume.
_SOURCES_BY_STACK = {
    stack: {**SOURCES, "compute_s": f"{_COMPUTE}; {why}", "recompute_s": f"{_COMPUTE}; {why}"}
    for stack, why in STACK_SOURCES.items()
}


_FP8_NOTE = (
    "assumed: FP8 block matmuls at the GPU's FP8 dense peak (GPU catalog) x the bf16 matmul efficiency, plus an "
    "amax-and-cast pass over each input (docs/accuracy.md, FP8); attention core and LM head in bf16"
)
_FP8_SOURCES = {
    "compute_s": f"{_COMPUTE}; {_FP8_NOTE}",
    "fp8": _FP8_NOTE,
    "mfu": f"{SOURCES['mfu']}: the bf16 peak, so FP8 speed shows as MFU bf16 alone could not reach",
}


_KERNEL_NOTES = {
    KernelChoice.COMPILE: "assumed: torch.compile of each block fuses RMSNorm's and rotary's element-wise chains "
    "(the fused stack's traffic, planner/throughput/kernel_stack.py)",
    KernelChoice.LIGER: "assumed: Liger's fused RMSNorm, rotary and SwiGLU kernels (the fused stack's traffic) and its "
    "chunked linear cross-entropy (no full logits in memory)",
}


def bottleneck_notes(step: float, exposed_comm: float, bubble: float, offload: float, launch_bound: bool) -> list[str]:
    """One line for each overhead that takes a large share of the step, for the plan's reasons."""
    notes = []
    if exposed_comm > 0.25 * step:
        notes.append(f"communication-bound: {exposed_comm / step:.0%} of the step waits on collectives")
    if offload > 0.25 * step:
        notes.append(f"offload-bound: {offload / step:.0%} of the step in PCIe transfers and the CPU optimizer")
    if bubble > 0.15 * step:
        notes.append(f"pipeline bubble: {bubble / step:.0%} of the step; more micro-batches or interleaving shrink it")
    if launch_bound:
        notes.append("kernel-launch bound: the micro-batch is too small to keep this GPU busy")
    return notes


def _offload_source(config: TrainingConfig, cluster: ClusterSpec) -> dict[str, str]:
    """ZeRO-Infinity's offload time also reads and writes NVMe: name the bandwidth it assumed, and whose it is."""
    if Offload.NVME not in (config.offload_optimizer, config.offload_params):
        return {}
    return {"offload_s": f"{SOURCES['offload_s']}; NVMe reads and writes: {cluster.nvme_bandwidth()[1]}"}


def _compression_source(config: TrainingConfig, world: int) -> dict[str, str]:
    if config.compression is GradientCompression.NONE:
        return {}
    grad_bytes = 4 if config.precision is Precision.FP32 else 2
    return compression_sources(config.compression, config.zero_stage, config.zero_ranks(world), grad_bytes)


_SOURCE_SETS: dict[tuple, dict[str, str]] = {}


def _fixed_sources(stack: KernelStack, implementation: Implementation, fp8: bool, kernels: KernelChoice) -> dict:
    """The sources every estimate of this kernel stack, implementation, FP8 and kernel choice names, merged
    once: the search merges them for thousands of estimates. Callers copy it (each estimate owns its dict)."""
    key = (stack, implementation, fp8, kernels)
    merged = _SOURCE_SETS.get(key)
    if merged is None:
        merged = _SOURCE_SETS[key] = {
            **_SOURCES_BY_STACK[stack],
            "implementation": f"assumed: {implementation.name} (--implementation; planner/throughput/implementation.py)",
            **(_FP8_SOURCES if fp8 else {}),
            **({"kernels": _KERNEL_NOTES[kernels]} if kernels is not KernelChoice.EAGER else {}),
        }
    return merged


_shapes: dict[int, tuple[ModelSpec, ModelShape, bool]] = {}
_hardware: dict[tuple, tuple[ClusterSpec, Device, Links, float]] = {}
# One Device object per distinct value: the stage cache keys on the device's identity, and the search's
# cluster slices (new ClusterSpec objects each search, same GPU) must find the stages of the whole cluster.
_devices: dict[Device, Device] = {}
_stages: dict[tuple, tuple[StageCompute, SequenceFlops]] = {}


def check_fp8_gpu(config: TrainingConfig, cluster: ClusterSpec) -> None:
    """FP8 matmuls need a GPU that has them: one line, before any estimate."""
    if config.fp8 and not cluster.gpu.dense_tflops.fp8:
        raise UserInputError(
            f"{cluster.gpu.name} has no FP8 matmuls (no fp8 peak in the GPU catalog); drop --fp8, or plan a GPU "
            "that has them (H100, H200, B200, MI300X: the fp8 column of `hardware-selector gpus`)"
        )


def _shape_of(spec: ModelSpec) -> tuple[ModelShape, bool]:
    cached = _shapes.get(id(spec))
    if cached is None or cached[0] is not spec:
        cached = (spec, model_shape(spec), arch_traits(spec).fused_attention)
        if len(_shapes) > 256:
            _shapes.clear()
            _stages.clear()  # its keys hold ids of the shapes just dropped
        _shapes[id(spec)] = cached
    return cached[1], cached[2]


def _build_hardware(
    cluster: ClusterSpec, config: TrainingConfig, k: ThroughputConstants
) -> tuple[Device, Links, float]:
    gpu = cluster.gpu
    peak = gpu.peak_tflops(config.precision.compute_dtype) * 1e12
    matmul_factor, attention_factor = architecture_efficiency(gpu.architecture)
    fp8_peak = gpu.dense_tflops.fp8 or 0.0
    device = Device(
        peak_flops=peak,
        matmul_flops=peak * matmul_factor,
        attention_flops=peak * attention_factor,
        memory_Bps=gpu.memory_bandwidth_GBps * 1e9,
        element_bytes=4 if config.precision is Precision.FP32 else 2,
        fp8_matmul_flops=fp8_peak * 1e12 * matmul_factor,
    )
    pcie_Bps = pcie_bandwidth_GBps_per_direction(gpu.pcie_generation or 3) * 1e9 * k.link_efficiency
    return device, cluster_links(cluster, k.link_efficiency), pcie_Bps


def _hardware_of(cluster: ClusterSpec, config: TrainingConfig) -> tuple[Device, Links, float]:
    """(device for the compute dtype, links, PCIe bytes/s) with the committed constants, cached by identity."""
    key = (id(cluster), config.precision)
    cached = _hardware.get(key)
    if cached is None or cached[0] is not cluster:
        if len(_hardware) > 256:
            _hardware.clear()
        if len(_devices) > 256:
            _devices.clear()
            _stages.clear()  # its keys hold ids of the devices just dropped
        device, links, pcie_Bps = _build_hardware(cluster, config, CONSTANTS)
        device = _devices.setdefault(device, device)
        cached = _hardware[key] = (cluster, device, links, pcie_Bps)
    return cached[1], cached[2], cached[3]


def _stage_of(
    shape: ModelShape, config: TrainingConfig, device: Device, fused_attention: bool, stack: KernelStack
) -> tuple[StageCompute, SequenceFlops]:
    """Strategy, sharding, offload and accumulation do not change a micro-batch's
    kernels, and the search varies exactly those: reuse the stage's compute."""
    # Plain values only: hashing the pydantic routing (Python code) cost more than the rest of the key.
    layout, routing = config.layout, config.routing
    key = (
        id(shape),
        id(device),
        config.micro_batch,
        config.seq_len,
        layout.tp,
        layout.pp,
        layout.stage_layers,
        layout.ep,
        *routing.__dict__.values(),  # every routing field, however many it grows
        layout.cp,
        config.fp8,
        config.sequence_parallel,
        config.activation_checkpointing,
        config.attention,
        config.lora_rank,
        config.qlora,
        stack,
        fused_attention,
    )
    cached = _stages.get(key)
    if cached is None:
        if len(_stages) > 4096:
            _stages.clear()
        stage = stage_compute(shape, config, device, CONSTANTS, fused_attention=fused_attention, stack=stack)
        cached = _stages[key] = (stage, sequence_flops(shape, config))
    return cached


def _construct(model: type, values: dict):
    """A validated-by-construction pydantic instance without re-validation: the search
    builds thousands of these, and model_construct alone costs more than the model."""
    instance: Any = object.__new__(model)
    object.__setattr__(instance, "__dict__", values)
    object.__setattr__(instance, "__pydantic_fields_set__", set(values))
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(instance, "__pydantic_private__", None)
    return instance


def estimate_throughput(
    spec: ModelSpec,
    config: TrainingConfig,
    cluster: ClusterSpec,
    *,
    constants: ThroughputConstants = CONSTANTS,
    implementation: Implementation = OUR_STRATEGIES,
) -> ThroughputEstimate:
    """`implementation`: the codebase whose behaviour to assume (implementation.py);
    by default what this project's strategies run. Published runs of other
    codebases (Megatron-LM, llm-foundry, ...) pass their preset."""
    k = constants
    stack = implementation.kernels
    if config.kernels is not KernelChoice.EAGER:
        stack = KernelStack.FUSED  # torch.compile and Liger fuse the norms' and rotary's chains
    check_fp8_gpu(config, cluster)
    shape, fused_attention = _shape_of(spec)
    fused_attention = fused_attention or not implementation.transformers_attention  # their own fused kernels
    if k is CONSTANTS:
        device, links, pcie_Bps = _hardware_of(cluster, config)
        stage, flops = _stage_of(shape, config, device, fused_attention, stack)
    else:  # calibration: other constants, nothing cached
        device, links, pcie_Bps = _build_hardware(cluster, config, k)
        stage = stage_compute(shape, config, device, k, fused_attention=fused_attention, stack=stack)
        flops = sequence_flops(shape, config)
    peak = device.peak_flops
    world = cluster.gpus_per_node * cluster.num_nodes
    comm = step_communication(
        shape,
        config,
        stage,
        links,
        world_size=world,
        pcie_Bps=pcie_Bps,
        memory_Bps=device.memory_Bps,
        k=k,
        nvme_Bps=cluster.nvme_bandwidth()[0] * 1e9,
        implementation=implementation,
    )

    accum = config.grad_accum
    pp, virtual = config.pipeline_parallel, config.virtual_stages
    # (p-1)/(m.v) of the pipelined compute; DualPipe feeds both ends: (p/2 - 1) stage-steps (implementation.py)
    steps = max(pp / 2 - 1, 0.0) if implementation.bidirectional_pipeline else pp - 1
    bubble = steps / virtual * stage.total_s if pp > 1 else 0.0
    compute = accum * (stage.forward_s + stage.backward_s)
    recompute = accum * stage.recompute_s
    step = compute + recompute + comm.exposed_s + bubble + comm.offload_s + comm.optimizer_step_s

    dp = max(world // config.model_parallel_size, 1)
    global_batch = config.micro_batch * accum * dp
    per_gpu_model = flops.model * global_batch / world / step
    per_gpu_hardware = flops.hardware * global_batch / world / step
    breakdown = _construct(
        StepTimeBreakdown,
        dict(
            compute_s=compute,
            recompute_s=recompute,
            data_parallel_comm_s=comm.data_parallel_s,
            tensor_parallel_comm_s=comm.tensor_parallel_s + comm.expert_parallel_s + comm.context_parallel_s,
            pipeline_p2p_s=comm.pipeline_p2p_s,
            exposed_comm_s=comm.exposed_s,
            pipeline_bubble_s=bubble,
            offload_s=comm.offload_s,
            optimizer_step_s=comm.optimizer_step_s,
        ),
    )
    return _construct(
        ThroughputEstimate,
        dict(
            step_time_s=step,
            tokens_per_s=global_batch * config.seq_len / step,
            samples_per_s=global_batch / step,
            tflops_per_gpu=per_gpu_model / 1e12,
            mfu=per_gpu_model / peak,
            hfu=per_gpu_hardware / peak,
            global_batch=global_batch,
            breakdown=breakdown,
            price_usd_per_gpu_hour=cluster.gpu.price_usd_per_hour,
            sources={
                **_fixed_sources(stack, implementation, config.fp8, config.kernels),
                **_offload_source(config, cluster),
                **_compression_source(config, world),
            },
            notes=bottleneck_notes(step, comm.exposed_s, bubble, comm.offload_s, stage.launch_bound),
            world_size=world,
        ),
    )
