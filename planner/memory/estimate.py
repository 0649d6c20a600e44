"""Peak memory of one training step on the most loaded GPU, with a source per number.

phases.py finds the step's peak (forward end, backward start, recompute,
backward end or optimizer step). Runtime overhead (CUDA context, allocator
fragmentation) is stated apart: op traces cannot see it, and users override
it for their stack (--overhead-gb).

Two entry points: `estimate_memory` returns the typed MemoryEstimate that
plans and the CLI carry; `estimate_memory_bytes` returns plain integers for
the strategy search's inner loop (no pydantic validation).

On a device whose memory is the host's RAM (the `cpu` pseudo-device,
`runtime=Runtime.CPU`), what a rank offloads to the CPU stays in the same pool:
it is added to the peak as the "host_offload" category (held through the
whole step, as DeepSpeed's and FSDP's offload buffers are), so offload saves
nothing there (tests/test_cpu_device_offload.py).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from planner.gradient_compression import wire_source
from planner.limits import MAX_GIB, check_number
from planner.memory.activations import activation_widths
from planner.memory.loss_kernels import LOSS_TEMPORARIES, LossKernel
from planner.memory.model_states import (
    BF16_RUNS_MIXED,
    SINGLE_TENSOR_ADAM_TEMPORARIES,
    dense_over_data_parallel,
    fp32_gradient_buffer,
    host_step_temporary_applies,
    runs_bf16_as_mixed,
    step_temporary_source,
    uses_native_mixed_precision,
)
from planner.memory.phases import TENSOR_CATEGORIES, StepPeak, step_peak
from planner.memory.runtime import Runtime
from planner.memory.stack_memory import (
    DENSE_OVER_DATA_PARALLEL,
    FP8_WEIGHTS,
    FP32_GRADIENT_BUFFER,
    OURS,
    StackMemory,
    moves_checkpoints_to_cpu,
)
from planner.memory.te_blocks import TE_BLOCKS_SOURCE, TeLayout, counts_te_blocks
from planner.models.spec import ModelSpec
from planner.training_config import (
    ActivationCheckpointing,
    GradientCompression,
    Offload,
    Strategy,
    TrainingConfig,
)

GIB = 2**30
# The offloaded states of a device whose memory is the host's: in per_gpu_bytes only there, and only when non-zero.
HOST_OFFLOAD = "host_offload"
CATEGORIES = (*TENSOR_CATEGORIES, HOST_OFFLOAD, "overhead")


class OverheadSettings(BaseModel):
    """Memory the framework cannot see as tensors; override for your stack."""

    model_config = ConfigDict(frozen=True)

    # CUDA context, cuBLAS/cuDNN workspaces and the NCCL communicator, as seen
    # by nvidia-smi on an otherwise idle process (typical: 0.5-1 GiB).
    cuda_context_bytes: int = Field(default=int(0.75 * GIB), ge=0)
    # On the cpu device, in its place: what a rank holds before its tensors (the interpreter, torch, transformers,
    # the data pipeline and gloo). Measured: the README's fine-tune demo (DDP, 2 ranks, torch 2.13 CPU) peaked at
    # 0.43 GiB RSS per rank with ~0.04 GiB of tensors (docs/hardware.md, "Where the figures come from", the `cpu` entry).
    host_process_bytes: int = Field(default=int(0.4 * GIB), ge=0)
    # Caching-allocator fragmentation reserve, as a share of tensor memory.
    fragmentation_fraction: float = Field(default=0.05, ge=0.0, le=1.0)

    @classmethod
    def fixed(cls, gib: float) -> OverheadSettings:
        """A flat overhead of `gib` GiB, no fragmentation share (--overhead-gb)."""
        gib = check_number("--overhead-gb", gib, high=MAX_GIB)
        return cls(cuda_context_bytes=int(gib * GIB), host_process_bytes=int(gib * GIB), fragmentation_fraction=0.0)


DEFAULT_OVERHEAD = OverheadSettings()


class MemoryEstimate(BaseModel):
    """Bytes on one GPU at the step's peak, broken down by what holds them."""

    model_config = ConfigDict(frozen=True)

    per_gpu_bytes: dict[str, int]  # CATEGORIES ("host_offload" only where non-zero) and "total"
    sources: dict[str, str]  # category -> where its figure comes from
    peak_phase: str  # one of phases.PHASES
    gpu_capacity_bytes: int
    headroom_fraction: float
    fits: bool
    # Usable GPU memory less the total: negative when it does not fit.
    margin_bytes: int = 0
    cpu_per_node_bytes: int
    cpu_capacity_per_node_bytes: int | None
    nvme_per_node_bytes: int
    # The node's NVMe (--nvme-gb); None when not given, and then not checked.
    nvme_capacity_per_node_bytes: int | None = None
    runtime: str = Runtime.CUDA.value
    notes: list[str]
    # Activations kept for backward at their own peak (end of forward), wherever the total peaks.
    activations_peak_bytes: int = 0

    @property
    def total(self) -> int:
        return self.per_gpu_bytes["total"]

    @property
    def usable_bytes(self) -> int:
        return int(self.gpu_capacity_bytes * (1 - self.headroom_fraction))


# Looked up once: a member access on an Enum class runs Python code in CPython 3.11 (enum.property), and
# fit_bytes runs for every candidate the search estimates.
_CPU_TRACE = Runtime.CPU_TRACE
_CPU = Runtime.CPU


def _overhead_bytes(tensors: int, overhead: OverheadSettings, runtime: Runtime) -> int:
    if runtime is _CPU_TRACE:
        return 0
    fixed = overhead.host_process_bytes if runtime is _CPU else overhead.cuda_context_bytes
    return int(fixed + overhead.fragmentation_fraction * tensors)


def _with_overhead(per_gpu: dict[str, float], overhead: OverheadSettings, runtime: Runtime) -> dict[str, int]:
    result = {name: int(value) for name, value in per_gpu.items()}
    tensors = sum(result.values())
    extra = _overhead_bytes(tensors, overhead, runtime)
    result["overhead"] = extra
    result["total"] = tensors + extra
    return result


def _tensors(peak: StepPeak, runtime: Runtime) -> dict[str, float]:
    """The peak's categories; on the cpu device also what the rank offloads to the CPU, which stays in its RAM
    (in the allocator's share too, as the rest of that pool is)."""
    offloaded = int(peak.cpu_per_rank) if runtime.memory_is_host else 0
    return {**peak.per_gpu, HOST_OFFLOAD: offloaded} if offloaded else peak.per_gpu


def fit_bytes(
    peak: StepPeak,
    gpus_per_node: int,
    overhead: OverheadSettings = DEFAULT_OVERHEAD,
    runtime: Runtime = Runtime.CUDA,
) -> tuple[int, int, int]:
    """(per-GPU total, CPU bytes per node, NVMe bytes per node) of a step peak: estimate_memory's "total",
    "cpu_per_node" and "nvme_per_node", all that whether it fits reads, without the categories. On the cpu
    device (Runtime.CPU) the rank's offloaded bytes count in its total (the module docstring)."""
    tensors = peak.tensor_bytes + (int(peak.cpu_per_rank) if runtime is _CPU else 0)
    total = tensors + _overhead_bytes(tensors, overhead, runtime)
    return total, int(peak.cpu_per_rank * gpus_per_node), int(peak.nvme_per_rank * gpus_per_node)


def host_fits(cpu_bytes: int, nvme_bytes: int, cpu_capacity: int | None, nvme_capacity: int | None) -> bool:
    """Whether what a node offloads fits its CPU RAM and its NVMe (a capacity of None is not checked)."""
    return (cpu_capacity is None or cpu_bytes <= cpu_capacity) and (
        nvme_capacity is None or nvme_bytes <= nvme_capacity
    )


def estimate_memory_bytes(
    spec: ModelSpec,
    config: TrainingConfig,
    *,
    world_size: int,
    gpus_per_node: int,
    overhead: OverheadSettings = DEFAULT_OVERHEAD,
    runtime: Runtime = Runtime.CUDA,
    stack: StackMemory = OURS,
) -> dict[str, int]:
    """Per-GPU bytes by category plus "total", "cpu_per_node" and "nvme_per_node": the fast path."""
    peak = step_peak(spec, config, world_size=world_size, gpus_per_node=gpus_per_node, runtime=runtime, stack=stack)
    result = _with_overhead(_tensors(peak, runtime), overhead, runtime)
    result["cpu_per_node"] = int(peak.cpu_per_rank * gpus_per_node)
    result["nvme_per_node"] = int(peak.nvme_per_rank * gpus_per_node)
    return result


def estimate_memory(
    spec: ModelSpec,
    config: TrainingConfig,
    *,
    world_size: int,
    gpus_per_node: int,
    gpu_capacity_bytes: int,
    cpu_capacity_per_node_bytes: int | None = None,
    headroom_fraction: float = 0.0,
    overhead: OverheadSettings = DEFAULT_OVERHEAD,
    runtime: Runtime = Runtime.CUDA,
    nvme_capacity_per_node_bytes: int | None = None,
    stack: StackMemory = OURS,
) -> MemoryEstimate:
    """Per-GPU memory of one training configuration, and whether it fits.

    runtime=Runtime.CPU_TRACE describes the step as the CPU trace harness runs
    it (benchmarks/memory/memory_trace.py), for validation; see runtime.py.
    runtime=Runtime.CPU describes the cpu device, whose memory is the host's RAM: what the rank offloads to the
    CPU is counted in its total, as the "host_offload" category.
    stack: what the training stack decides of the memory (stack_memory.py: its loss kernel, and where full
    checkpointing keeps its checkpoints); ours is OURS.
    """
    peak = step_peak(spec, config, world_size=world_size, gpus_per_node=gpus_per_node, runtime=runtime, stack=stack)
    tensors = _tensors(peak, runtime)
    moved = moves_checkpoints_to_cpu(spec, config, stack)
    loss = stack.loss_kernel(spec, config)
    sources = _sources(config, peak.phase, runtime, overhead, loss, moved, bool(peak.unsharded_stage))
    _stack_sources(sources, spec, config, runtime, stack)
    notes = peak.notes
    if HOST_OFFLOAD in tensors:
        sources[HOST_OFFLOAD] = (
            f"formula: {_offloaded_what(config, Offload.CPU, runtime)}, per rank, held through the step: offloaded to the "
            "CPU, whose RAM is this device's memory, so it stays in the peak (planner/memory/model_states.py)"
        )
        sources["total"] = f"sum of the above at the step's peak ({peak.phase}), offloaded states included"
        notes = [*notes, "offload saves no memory here: the device's memory is the host RAM the states move to"]
    per_gpu = _with_overhead(tensors, overhead, runtime)
    cpu_per_node = int(peak.cpu_per_rank * gpus_per_node)
    usable = int(gpu_capacity_bytes * (1 - headroom_fraction))
    fits = per_gpu["total"] <= usable
    nvme_per_node = int(peak.nvme_per_rank * gpus_per_node)
    if not host_fits(cpu_per_node, nvme_per_node, cpu_capacity_per_node_bytes, nvme_capacity_per_node_bytes):
        fits = False
    return MemoryEstimate(
        per_gpu_bytes=per_gpu,
        sources=sources,
        peak_phase=peak.phase,
        gpu_capacity_bytes=gpu_capacity_bytes,
        headroom_fraction=headroom_fraction,
        fits=fits,
        margin_bytes=usable - per_gpu["total"],
        cpu_per_node_bytes=cpu_per_node,
        cpu_capacity_per_node_bytes=cpu_capacity_per_node_bytes,
        nvme_per_node_bytes=nvme_per_node,
        nvme_capacity_per_node_bytes=nvme_capacity_per_node_bytes,
        runtime=runtime.value,
        notes=notes,
        activations_peak_bytes=int(peak.activations_peak),
    )


def _overhead_source(overhead: OverheadSettings, runtime: Runtime) -> str:
    """Where the overhead figure comes from, with its numbers: `plan` has no --overhead-gb, only `estimate` does."""
    if not runtime.has_runtime_overhead:
        return "none: the CPU trace has no CUDA context or allocator"
    if runtime is Runtime.CPU:
        fixed = f"{overhead.host_process_bytes / GIB:.3g} GiB process baseline (measured RSS of a tiny CPU rank)"
    else:
        fixed = f"{overhead.cuda_context_bytes / GIB:.3g} GiB CUDA context"
    if not overhead.fragmentation_fraction:
        return f"assumption: {overhead.cuda_context_bytes / GIB:.3g} GiB flat (--overhead-gb)"
    return (
        f"assumption: {fixed} + {overhead.fragmentation_fraction:.0%} of the tensors' memory "
        "as allocator fragmentation reserve (estimate --overhead-gb sets a flat figure)"
    )


CHECKPOINTS_ON_CPU = "full checkpointing's checkpoints in CPU memory (DeepSpeed's cpu_checkpointing: stack_memory.py)"


def te_blocks_counted(spec: ModelSpec, config: TrainingConfig, stack: StackMemory, runtime: Runtime) -> bool:
    """Whether the stack's Transformer Engine blocks were counted for this config (te_blocks.py), not transformers'."""
    if not stack.te_blocks:
        return False
    widths = activation_widths(config, uses_native_mixed_precision(config), runtime)
    layout = TeLayout(config.tensor_parallel, config.sequence_parallel, config.fp8, widths.compute)
    checkpointing = config.activation_checkpointing
    return counts_te_blocks(spec, layout, checkpointing, cp=config.context_parallel, autocast=widths.autocast)


def _stack_sources(
    sources: dict[str, str], spec: ModelSpec, config: TrainingConfig, runtime: Runtime, stack: StackMemory
) -> None:
    """Where the stack's own blocks or optimizer sharding were counted, say so (te_blocks.py, stack_memory.py)."""
    if te_blocks_counted(spec, config, stack, runtime):
        sources["activations"] = TE_BLOCKS_SOURCE
    if dense_over_data_parallel(config, stack):
        sources["optimizer_states"] += f"; {DENSE_OVER_DATA_PARALLEL}"
    if fp32_gradient_buffer(config, stack):
        sources["gradients"] += "; " + FP32_GRADIENT_BUFFER
    if stack.fp8_weights and config.fp8:
        sources["buffers"] += "; " + FP8_WEIGHTS


def _sources(
    config: TrainingConfig,
    phase: str,
    runtime: Runtime,
    overhead: OverheadSettings,
    loss: LossKernel,
    checkpoints_on_cpu: bool = False,
    unsharded_stage: bool = False,
) -> dict[str, str]:
    framework = "PyTorch-native layout" if uses_native_mixed_precision(config) else "DeepSpeed-style layout"
    if runs_bf16_as_mixed(config):
        framework += f"; {BF16_RUNS_MIXED}"
    buffers = "formula: buckets, gathered units and autocast weight copies as our emitted configs run"
    if config.compression is not GradientCompression.NONE:
        buffers += (
            f"; {wire_source(config.compression)}: fp32 error-feedback residuals and the buckets' sums, counted "
            "from its tensors (planner/memory/compression_buffers.py)"
        )
    if unsharded_stage:
        buffers += (
            "; the pipelined stage's parameters gathered and its gradients unreduced (fp32) until the step's last "
            "backward, as torchtitan's FSDP runs under torch's pipelining (read in their code: stack_memory.py)"
        )
    terms = {
        "parameters": f"formula: ZeRO paper Sec. 3/5 bytes per parameter, {framework}",
        "gradients": f"formula: ZeRO paper Sec. 5, {framework}",
        "optimizer_states": f"formula: {config.optimizer.value} state bytes per parameter, sharded per strategy"
        + step_temporary_source(config, runtime),
        "activations": "formula: Korthikanti et al. 2022 Table 2 generalised to the HF block, checked by traces (docs/accuracy.md)"
        + (
            "; op-level checkpointing: each block's input and every second matmul's output (planner/memory/"
            "op_checkpointing.py, traced)"
            if config.activation_checkpointing is ActivationCheckpointing.OP
            else ""
        )
        + (f"; {CHECKPOINTS_ON_CPU}, the block in flight's here" if checkpoints_on_cpu else ""),
        "temporaries": f"formula: {LOSS_TEMPORARIES[loss]}; recomputed block",
        "buffers": buffers,
        "overhead": _overhead_source(overhead, runtime),
    }
    # Said in full, not "the above": the total is printed alone too (a tutorial's one line, the report's data).
    *others, last = (name.replace("_", " ") for name in terms)
    named = f"{', '.join(others)} and {last}"
    return {
        **terms,
        "total": f"sum of the per-GPU {named} at the step's peak ({phase})",
        "cpu_per_node": _offload_source(config, Offload.CPU, runtime)
        + (f"; and {CHECKPOINTS_ON_CPU}, per rank x the node's GPUs" if checkpoints_on_cpu else ""),
        "nvme_per_node": _offload_source(config, Offload.NVME, runtime),
    }


def _offload_source(config: TrainingConfig, where: Offload, runtime: Runtime) -> str:
    """Where a node's host-memory or NVMe figure comes from (planner/memory/model_states.py's offload rules)."""
    if where not in (config.offload_params, config.offload_optimizer):
        return f"none: nothing offloaded to {where.value}"
    return f"formula: {_offloaded_what(config, where, runtime)}, per rank x the node's GPUs (planner/memory/model_states.py)"


def _offloaded_what(config: TrainingConfig, where: Offload, runtime: Runtime) -> str:
    """What the config offloads to `where`, in words (model_states._apply_offload's rules)."""
    if config.strategy is Strategy.FSDP:
        what = "FSDP CPU offload's sharded parameters, gradients and optimizer states"
        if host_step_temporary_applies(config, runtime):
            what += (
                f", and at the step torch's single-tensor AdamW temporaries, {SINGLE_TENSOR_ADAM_TEMPORARIES} x the "
                "largest parameter shard (torch/optim/adam.py:544, measured: benchmarks/memory/optimizer_step_transient.py)"
            )
        return what
    moved = []
    if config.offload_optimizer is where:
        moved.append("the optimizer's master weights, states and fp32 gradients")
    if config.offload_params is where:
        moved.append("the parameters")
    return f"ZeRO-{'Infinity' if where is Offload.NVME else 'Offload'}: {' and '.join(moved)}"
