"""Peak memory of one training step on the most loaded GPU, with a source per number.

The step has two peaks, and the estimate is the larger:
- the start of backward: weights, optimizer states, gradients accumulated so
  far, every saved activation, the loss temporaries and the gathered buffers;
- the end of backward and the optimizer step: weights, all gradients and the
  optimizer states, once activations are freed.
Runtime overhead (CUDA context, allocator fragmentation) is stated apart: op
traces cannot see it, and users override it for their stack.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..model_spec import ModelSpec
from ..training_config import TrainingConfig
from .activations import activation_widths, estimate_activations
from .buffers import estimate_buffers
from .model_states import model_state_bytes, uses_native_mixed_precision
from .rank_params import rank_params

GIB = 2**30
CATEGORIES = ("parameters", "gradients", "optimizer_states", "activations", "temporaries", "buffers", "overhead")


class OverheadSettings(BaseModel):
    """Memory the framework cannot see as tensors; override for your stack."""

    model_config = ConfigDict(frozen=True)

    # CUDA context, cuBLAS/cuDNN workspaces and the NCCL communicator, as seen
    # by nvidia-smi on an otherwise idle process (typical: 0.5-1 GiB).
    cuda_context_bytes: int = Field(default=int(0.75 * GIB), ge=0)
    # Caching-allocator fragmentation reserve, as a share of tensor memory.
    fragmentation_fraction: float = Field(default=0.05, ge=0.0, le=1.0)


class MemoryEstimate(BaseModel):
    """Bytes on one GPU at the step's peak, broken down by what holds them."""

    model_config = ConfigDict(frozen=True)

    per_gpu_bytes: dict[str, int]  # CATEGORIES and "total"
    sources: dict[str, str]  # category -> where its figure comes from
    peak_phase: Literal["backward-start", "optimizer-step"]
    gpu_capacity_bytes: int
    headroom_fraction: float
    fits: bool
    cpu_per_node_bytes: int
    cpu_capacity_per_node_bytes: int | None
    nvme_per_node_bytes: int
    notes: list[str]

    @property
    def total(self) -> int:
        return self.per_gpu_bytes["total"]

    @property
    def usable_bytes(self) -> int:
        return int(self.gpu_capacity_bytes * (1 - self.headroom_fraction))


def estimate_memory(
    spec: ModelSpec,
    config: TrainingConfig,
    *,
    world_size: int,
    gpus_per_node: int,
    gpu_capacity_bytes: int,
    cpu_capacity_per_node_bytes: int | None = None,
    headroom_fraction: float = 0.0,
    overhead: OverheadSettings = OverheadSettings(),
) -> MemoryEstimate:
    config.check_against(spec, world_size, gpus_per_node)
    dp = config.data_parallel_size(world_size)
    params = rank_params(spec, config)
    states = model_state_bytes(params, config, dp, gpus_per_node, spec.hidden_size)
    widths = activation_widths(config, uses_native_mixed_precision(config))
    acts = estimate_activations(spec, config, widths)
    buffers = estimate_buffers(spec, config, params, dp)

    accumulated_grads = states.gradients if config.grad_accum > 1 else 0.0
    backward_start = {
        "parameters": states.parameters,
        "gradients": accumulated_grads,
        "optimizer_states": states.optimizer_states,
        "activations": acts.activations,
        "temporaries": acts.temporaries,
        "buffers": buffers.during_backward,
    }
    optimizer_step = {
        "parameters": states.parameters,
        "gradients": states.gradients,
        "optimizer_states": states.optimizer_states,
        "activations": 0.0,
        "temporaries": 0.0,
        "buffers": buffers.during_step,
    }
    phase: Literal["backward-start", "optimizer-step"]
    if sum(backward_start.values()) >= sum(optimizer_step.values()):
        phase, peak = "backward-start", backward_start
    else:
        phase, peak = "optimizer-step", optimizer_step

    tensors = sum(peak.values())
    per_gpu = {name: int(value) for name, value in peak.items()}
    per_gpu["overhead"] = int(overhead.cuda_context_bytes + overhead.fragmentation_fraction * tensors)
    per_gpu["total"] = sum(per_gpu[name] for name in CATEGORIES)

    cpu_per_node = int(states.cpu * gpus_per_node)
    usable = gpu_capacity_bytes * (1 - headroom_fraction)
    fits = per_gpu["total"] <= usable
    if cpu_capacity_per_node_bytes is not None and cpu_per_node > cpu_capacity_per_node_bytes:
        fits = False
    return MemoryEstimate(
        per_gpu_bytes=per_gpu,
        sources=_sources(config),
        peak_phase=phase,
        gpu_capacity_bytes=gpu_capacity_bytes,
        headroom_fraction=headroom_fraction,
        fits=fits,
        cpu_per_node_bytes=cpu_per_node,
        cpu_capacity_per_node_bytes=cpu_capacity_per_node_bytes,
        nvme_per_node_bytes=int(states.nvme * gpus_per_node),
        notes=[*states.notes, *acts.notes, *buffers.notes],
    )


def _sources(config: TrainingConfig) -> dict[str, str]:
    framework = "PyTorch-native layout" if uses_native_mixed_precision(config) else "DeepSpeed-style layout"
    return {
        "parameters": f"formula: ZeRO paper Sec. 3/5 bytes per parameter, {framework}",
        "gradients": f"formula: ZeRO paper Sec. 5, {framework}",
        "optimizer_states": f"formula: {config.optimizer.value} state bytes per parameter, sharded per strategy",
        "activations": "formula: Korthikanti et al. 2022 Table 2, generalised to the HF block (docs/accuracy.md)",
        "temporaries": "formula: fp32 logits and cross-entropy over the vocabulary at backward start",
        "buffers": "formula: buckets and gathered units as our emitted configs size them",
        "overhead": "assumption: CUDA context + allocator fragmentation reserve (override with --overhead-gb)",
        "total": "sum of the above at the step's peak phase",
    }
