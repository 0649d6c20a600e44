"""What throughput estimates share, derived once and cached: a spec's shape, a cluster's device and links,
a stage's compute.

The search estimates thousands of candidates of one spec on a few clusters;
these depend on far fewer values than a candidate has. Caches key on
identities (a spec, a cluster, the interned device) and hold the keyed object
so its id is not reused while the entry lives.
"""

from __future__ import annotations

from dataclasses import replace

from planner.hardware.cluster import ClusterSpec
from planner.hardware.gpus import pcie_bandwidth_GBps_per_direction
from planner.memory.arch_traits import arch_traits
from planner.models.flops import ModelShape, SequenceFlops, model_shape
from planner.models.spec import ModelSpec
from planner.throughput.collectives import Links, cluster_links
from planner.throughput.compute import StageCompute
from planner.throughput.constants import CONSTANTS, ThroughputConstants
from planner.throughput.kernel_stack import KernelStack
from planner.throughput.kernels import Device
from planner.throughput.library_efficiency import library_efficiency
from planner.training_config import ActivationCheckpointing, Precision, TrainingConfig

_shapes: dict[int, tuple[ModelSpec, ModelShape, bool]] = {}
_hardware: dict[tuple, tuple[ClusterSpec, Device, Links, float]] = {}
# One Device object per distinct value: the stage cache keys on the device's identity, and the search's
# cluster slices (new ClusterSpec objects each search, same GPU) must find the stages of the whole cluster.
_devices: dict[Device, Device] = {}
# stage_key -> (micro-batch, activation checkpointing) -> the stage's compute and a sequence's FLOPs.
_stages: dict[tuple, dict[tuple[int, ActivationCheckpointing], tuple[StageCompute, SequenceFlops]]] = {}


def shape_of(spec: ModelSpec) -> tuple[ModelShape, bool]:
    cached = _shapes.get(id(spec))
    if cached is None or cached[0] is not spec:
        cached = (spec, model_shape(spec), arch_traits(spec).fused_attention)
        if len(_shapes) > 256:
            _shapes.clear()
            _stages.clear()  # its keys hold ids of the shapes just dropped
        _shapes[id(spec)] = cached
    return cached[1], cached[2]


def build_hardware(cluster: ClusterSpec, config: TrainingConfig, k: ThroughputConstants) -> tuple[Device, Links, float]:
    gpu = cluster.gpu
    peak = gpu.peak_tflops(config.precision.compute_dtype) * 1e12
    factors = library_efficiency(gpu)
    fp8_peak = gpu.dense_tflops.fp8 or 0.0
    device = Device(
        peak_flops=peak,
        matmul_flops=peak * factors.matmul,
        attention_flops=peak * factors.attention,
        memory_Bps=gpu.memory_bandwidth_GBps * 1e9,
        element_bytes=4 if config.precision is Precision.FP32 else 2,
        fp8_matmul_flops=fp8_peak * 1e12 * factors.fp8,
    )
    pcie_Bps = pcie_bandwidth_GBps_per_direction(gpu.pcie_generation or 3) * 1e9 * k.link_efficiency
    if gpu.memory_is_host:
        # The cpu device has no host link: an "offload" copy stays in the same RAM, each byte read and written,
        # at half its copy bandwidth (which counts both: benchmarks/accuracy/measure_cpu.py).
        pcie_Bps = gpu.memory_bandwidth_GBps * 1e9 / 2
    if cluster.host_GBps_per_gpu is not None:  # measured with every GPU of the node moving data at once
        pcie_Bps = cluster.host_GBps_per_gpu * 1e9
    return device, cluster_links(cluster, k.link_efficiency), pcie_Bps


def hardware_of(cluster: ClusterSpec, config: TrainingConfig) -> tuple[Device, Links, float]:
    """(device for the compute dtype, links, PCIe bytes/s) with the committed constants, cached by identity."""
    key = (id(cluster), config.precision)
    cached = _hardware.get(key)
    if cached is None or cached[0] is not cluster:
        if len(_hardware) > 256:
            _hardware.clear()
        if len(_devices) > 256:
            _devices.clear()
            _stages.clear()  # its keys hold ids of the devices just dropped
        device, links, pcie_Bps = build_hardware(cluster, config, CONSTANTS)
        device = _devices.setdefault(device, device)
        cached = _hardware[key] = (cluster, device, links, pcie_Bps)
    return cached[1], cached[2], cached[3]


def attention_scaled_device(device: Device, scale: float) -> Device:
    """`device` with its attention kernel's rate times `scale` (the kernel and length the stack runs against the ones
    its GPU's factor is read at: Implementation.attention_kernel), interned as hardware_of's devices are, so that the
    stage cache keyed on its identity finds it again."""
    scaled = replace(device, attention_flops=device.attention_flops * scale)
    if len(_devices) > 256:
        _devices.clear()
        _stages.clear()  # its keys hold ids of the devices just dropped
    return _devices.setdefault(scaled, scaled)


def stage_key(
    shape: ModelShape, config: TrainingConfig, device: Device, fused_attention: bool, stack: KernelStack
) -> tuple:
    """What a stage's compute depends on besides the micro-batch and the activation checkpointing.
    Strategy, sharding, offload and accumulation do not change a micro-batch's kernels, and the search
    varies exactly those. Plain values only: hashing the pydantic routing (Python code) cost more than the
    rest of the key."""
    layout = config.layout
    return (
        id(shape),
        id(device),
        config.seq_len,
        layout.tp,
        layout.pp,
        layout.stage_layers,
        layout.ep,
        *config.routing.__dict__.values(),  # every routing field, however many it grows
        layout.cp,
        config.fp8,
        config.sequence_parallel,
        config.attention,
        config.lora_rank,
        config.qlora,
        stack,
        fused_attention,
    )


def stages_of(key: tuple) -> dict[tuple[int, ActivationCheckpointing], tuple[StageCompute, SequenceFlops]]:
    """The stages computed so far for one stage_key, by (micro-batch, activation checkpointing)."""
    stages = _stages.get(key)
    if stages is None:
        if len(_stages) > 256:  # each holds its stages by micro-batch and AC: a few hundred at most
            _stages.clear()
        stages = _stages[key] = {}
    return stages
