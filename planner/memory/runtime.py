"""Where the step runs: a CUDA GPU (what users plan for), the cpu device, or the CPU trace harness.

The estimator describes a CUDA training step by default. `Runtime.CPU_TRACE`
describes the same step as benchmarks/memory/memory_trace.py records it on the CPU
(FakeTensorMode + MemTracker), so the trace can validate the estimator's
mechanisms one for one. Only three things differ, each a documented property
of PyTorch, never a per-config correction:

- Dropout: CUDA runs the fused native_dropout kernel, which keeps a 1-byte
  bool mask; the CPU path (`_dropout_impl`) multiplies by a noise tensor of the
  input's dtype and keeps that (2 or 4 bytes per element).
- CUDA autocast runs softmax in fp32; CPU autocast leaves it in the input's
  dtype (16 bits unless a float mask was added first).
- No CUDA context and no caching-allocator fragmentation exist in a trace:
  the runtime overhead is zero.
- The trace runs MoE experts through transformers' grouped_mm fallback, which
  autocast does not cover: under autocast the experts compute in fp32 there,
  while HF's per-expert linear loop on CUDA runs them in 16 bits.
- Everything else (foreach optimizer temporaries, saved tensors, FSDP2
  all-gathers) is the same code path on both devices.

`Runtime.CPU` describes a real training step on CPU processes (`--gpu cpu`),
whose "device memory" is the host's RAM. It runs the CPU's kernels, so its
dropout, autocast softmax and MoE experts are the trace's (above), and it
differs from both in three things:

- What a rank offloads to the CPU stays in that same RAM, so the estimate
  counts it in the peak (estimate.py's "host_offload").
- torch's optimizers step CPU tensors with their single-tensor loop (foreach
  defaults on only for CUDA-like devices: torch.optim.optimizer's
  _default_to_fused_or_foreach), so no whole-group foreach temporary, but
  each tensor's own (model_states.py's _step_temporary: 2 x the largest).
- Its runtime overhead is the process's own baseline, not a CUDA context
  (estimate.py's OverheadSettings.host_process_bytes, a measured RSS).
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.hardware.gpus import GpuSpec


class Runtime(str, Enum):
    CUDA = "cuda"
    CPU = "cpu"
    CPU_TRACE = "cpu-trace"

    @property
    def autocast_softmax_fp32(self) -> bool:
        """True where autocast computes softmax in fp32 whatever its input: CUDA's autocast, not the CPU's."""
        return self is Runtime.CUDA

    @property
    def autocast_covers_experts(self) -> bool:
        return self is Runtime.CUDA

    def dropout_mask_bytes(self, width: int) -> int:
        """Bytes per element dropout keeps for backward besides its output: CUDA's fused kernel a 1-byte mask, the
        CPU path its noise tensor at the input's width."""
        return 1 if self is Runtime.CUDA else width

    @property
    def has_runtime_overhead(self) -> bool:
        return self is not Runtime.CPU_TRACE

    @property
    def memory_is_host(self) -> bool:
        """The device's memory is the host's RAM: what the rank offloads to the CPU stays in it."""
        return self is Runtime.CPU

    @property
    def foreach_optimizer(self) -> bool:
        """torch's optimizers default to their foreach kernels (a whole-group temporary) on these tensors."""
        return self is not Runtime.CPU


def runtime_for(gpu: GpuSpec) -> Runtime:
    """How the estimator describes a training step on this device: the cpu device's memory is the host's, any
    GPU's is its own."""
    return Runtime.CPU if gpu.memory_is_host else Runtime.CUDA
