"""Where the step runs: a CUDA GPU (what users plan for) or the CPU trace harness.

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
"""

from __future__ import annotations

from enum import Enum


class Runtime(str, Enum):
    CUDA = "cuda"
    CPU_TRACE = "cpu-trace"

    @property
    def autocast_softmax_fp32(self) -> bool:
        """True where autocast computes softmax in fp32 whatever its input."""
        return self is Runtime.CUDA

    @property
    def autocast_covers_experts(self) -> bool:
        return self is Runtime.CUDA

    def dropout_mask_bytes(self, width: int) -> int:
        """Bytes per element dropout keeps for backward besides its output."""
        return 1 if self is Runtime.CUDA else width

    @property
    def has_runtime_overhead(self) -> bool:
        return self is Runtime.CUDA
