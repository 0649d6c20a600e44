"""Where each figure of a step-time estimate comes from (its `sources`), and the plan's bottleneck lines.

Every number the planner prints names its source (docs/accuracy.md): the step's terms are formulas over the
kernel model (compute.py) and the α–β collectives (communication.py), with assumed efficiencies named where
they are assumed. The sets shared by every estimate of a kernel stack, implementation, FP8 and kernel choice
are merged once (the search asks for thousands); estimate.py adds the per-plan offload and compression ones.
"""

from __future__ import annotations

from planner.hardware.cluster import ClusterSpec
from planner.throughput.constants import CALIBRATION_SOURCE
from planner.throughput.cpu_optimizer import DEEPSPEED_CPU_ADAM_2025, CpuOptimizer, cpu_optimizer
from planner.throughput.implementation import OUR_STRATEGIES, Implementation
from planner.throughput.kernel_stack import STACK_SOURCES, KernelStack
from planner.training_config import GradientCompression, KernelChoice, Offload, Precision, TrainingConfig

_COMPUTE = (
    f"formula: shape-aware matmul roofline + fused attention + element-wise passes; {CALIBRATION_SOURCE}; "
    "other GPUs scaled by their generation's library efficiency against the A100's (gpu_library_efficiency)"
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
    "offload_s": "none: nothing offloaded",
    "optimizer_step_s": "formula: HBM bytes per parameter of the optimizer update / memory bandwidth (assumed bytes)",
}
# The compute figures also name the kernel stack they assume.
_SOURCES_BY_STACK = {
    stack: {**SOURCES, "compute_s": f"{_COMPUTE}; {why}", "recompute_s": f"{_COMPUTE}; {why}"}
    for stack, why in STACK_SOURCES.items()
}


_FP8_NOTE = (
    "assumed: FP8 block matmuls at the GPU's FP8 dense peak (GPU catalog) x the matmul efficiency at its measured "
    "FP8 share (gpu_library_efficiency; the bf16 share where none was measured), plus an amax-and-cast pass over "
    "each input (docs/accuracy.md, FP8); attention core and LM head in bf16"
)
_FP8_SOURCES = {
    "compute_s": f"{_COMPUTE}; {_FP8_NOTE}",
    "fp8": _FP8_NOTE,
    "mfu": f"{SOURCES['mfu']}: the bf16 peak, so FP8 speed shows as MFU bf16 alone could not reach",
}


_KERNEL_NOTES = {
    KernelChoice.COMPILE: "assumed: torch.compile of each block fuses RMSNorm's and rotary's element-wise chains "
    "and the MLP activation's (gelu_new and the like; the fused stack's traffic, planner/throughput/kernel_stack.py)",
    KernelChoice.LIGER: "assumed: Liger's fused RMSNorm, rotary and SwiGLU kernels (the fused stack's traffic) and its "
    "chunked linear cross-entropy (no full logits in memory, but under our context parallelism, whose loss is the "
    "engine's own over the model's logits)",
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


def offload_source(config: TrainingConfig, cluster: ClusterSpec) -> dict[str, str]:
    """What the plan's offload time is made of: nothing offloaded; copies within the host (the cpu device, whose
    memory is the host's and whose own cores step the optimizer); PCIe transfers and the CPU optimizer, torch's under
    FSDP and our engine and DeepSpeed's otherwise, with ZeRO-Infinity's NVMe reads and writes at the bandwidth it
    assumed."""
    offloaded = (config.offload_optimizer, config.offload_params)
    if offloaded == (Offload.NONE, Offload.NONE):
        return {}
    if cluster.gpu.memory_is_host and Offload.CPU in offloaded:
        return {
            "offload_s": "formula: copies within host RAM at half the device's copy bandwidth (read + write) + the "
            "optimizer step on the rank's own core, as without offload: the device's memory is the host's, so "
            "offload only adds the copies (planner/throughput/communication.py)"
        }
    on_cpu = cpu_optimizer(config)
    source = "formula: PCIe transfers"
    if on_cpu is not None:
        source += f" + {on_cpu.value} (planner/throughput/constants.py)"
    if Offload.NVME in offloaded:
        return {"offload_s": f"{source}; NVMe reads and writes: {cluster.nvme_bandwidth()[1]}"}
    if on_cpu is CpuOptimizer.DEEPSPEED_CPU_ADAM and config.offload_optimizer is Offload.CPU:
        source += DEEPSPEED_CPU_ADAM_2025
    return {"offload_s": source}


def compression_source(config: TrainingConfig, world: int) -> dict[str, str]:
    if config.compression is GradientCompression.NONE:
        return {}
    from planner.throughput.compressed_reduction import compression_sources  # here: only a compressed plan

    grad_bytes = 4 if config.precision is Precision.FP32 else 2
    return compression_sources(config.compression, config.zero_stage, config.zero_ranks(world), grad_bytes)


ZEROPP_SOURCE = (
    "formula: ZeRO++'s collectives (planner/throughput/zeropp.py): the forward gathers at int8, the backward "
    "gathers inside the node from hpZ's secondary partition, the gradients at int4; the cross-node traffic 0.75 of "
    "the model's size a step against ZeRO-3's 3, as DeepSpeed's ZeRO++ blog states it; (de)quantization kernels not "
    "charged"
)


def zeropp_source(config: TrainingConfig) -> dict[str, str]:
    return {"zeropp": ZEROPP_SOURCE, "data_parallel_comm_s": ZEROPP_SOURCE} if config.zeropp else {}


def shortfall_sources(source: str) -> dict[str, str]:
    """An implementation's measured shortfall (measured_shortfall.py): its own figure, and the step that carries it."""
    return {"measured_shortfall_s": source, "step_time_s": f"{SOURCES['step_time_s']}; + {source}"}


_SOURCE_SETS: dict[tuple, dict[str, str]] = {}
# Said beside any other codebase's preset: --implementation moves the speed and, of the memory, what the stack
# decides (its cross-entropy kernel, where it keeps checkpoints and gathered stages), not the blocks', which counts the
# tensors transformers' modules keep (traced), more than a stack with fused kernels keeps.
OTHER_STACK_MEMORY = (
    "; the memory estimate counts this stack's cross-entropy kernel and where it keeps checkpoints and gathered "
    "stages (planner/memory/stack_memory.py) but the tensors transformers' modules keep in the blocks, which this "
    'stack may keep fewer of (its published runs: docs/accuracy.md, "Every published run, the same way")'
)
GELU_KEEPS_INPUT = "; a GELU's activation counted as this stack keeps it, its input alone (stack_memory.py)"
# Megatron-Core's preset: its blocks are counted as Transformer Engine's keep them (read in its code, not traced).
TE_STACK_MEMORY = (
    "; the memory estimate counts this stack's blocks as Megatron-Core's Transformer Engine layers keep them "
    "(planner/memory/te_blocks.py, read in its code, not traced; as transformers' modules keep them where that "
    "reading does not reach: context parallelism, selective or op-level recomputation, latent attention, dropout, "
    "encoders), its distributed optimizer's dense and expert sharding, its fp32 gradient buffer, its FP8 weights and "
    "its cross-entropy kernel (planner/memory/stack_memory.py)"
)


def fixed_sources(stack: KernelStack, implementation: Implementation, fp8: bool, kernels: KernelChoice) -> dict:
    """The sources every estimate of this kernel stack, implementation, FP8 and kernel choice names, merged
    once: the search merges them for thousands of estimates. Callers copy it (each estimate owns its dict)."""
    key = (stack, implementation, fp8, kernels)
    merged = _SOURCE_SETS.get(key)
    if merged is None:
        merged = _SOURCE_SETS[key] = {
            **_SOURCES_BY_STACK[stack],
            "implementation": f"assumed: {implementation.name} (--implementation; planner/throughput/implementation.py)"
            + (
                ""
                if implementation is OUR_STRATEGIES
                else TE_STACK_MEMORY
                if implementation.memory.te_blocks
                else OTHER_STACK_MEMORY + (GELU_KEEPS_INPUT if implementation.memory.gelu_keeps_input else "")
            ),
            **(_FP8_SOURCES if fp8 else {}),
            **({"kernels": _KERNEL_NOTES[kernels]} if kernels is not KernelChoice.EAGER else {}),
        }
    return merged
