"""Which optimizer steps on the CPU when a plan offloads, decided once for its rate and its source's words.

- Nothing steps on the CPU unless the optimizer is offloaded, or FSDP offloads its parameters (torch's CPUOffload
  moves parameters and gradients together, so the optimizer follows them).
- FSDP steps with torch's Adam on the CPU; our engine with its ChunkedAdam, which walks torch's single-tensor Adam
  in chunks (backends/parts/chunked_adamw.py), so at torch's rate; DeepSpeed (and the Megatron stacks built on it)
  with its vectorised CPU Adam.
- Both rates are ZeRO-Offload's Table 4 on a DGX-2 (planner/throughput/constants.py). DeepSpeed's own 2025 timing of
  its CPU offload ran 2.4x slower than that rate charges (docs/accuracy.md, "DeepSpeed's own 2025 timing of
  ZeRO-Offload"): said in the source, not fitted.

tests/test_offload_accuracy.py holds the words and the rates each plan is charged.
"""

from __future__ import annotations

from enum import Enum

from planner.throughput.constants import ThroughputConstants
from planner.training_config import Offload, Strategy, TrainingConfig


class CpuOptimizer(Enum):
    TORCH_ADAM = "torch's Adam on the CPU at the PT-CPU rate the ZeRO-Offload paper measured on a DGX-2 (its Table 4)"
    ENGINE_CHUNKED_ADAM = (
        "our engine's ChunkedAdam (torch's Adam in chunks) on the CPU at the PT-CPU rate the ZeRO-Offload paper "
        "measured on a DGX-2 (its Table 4)"
    )
    DEEPSPEED_CPU_ADAM = "DeepSpeed's CPU Adam at the rate the ZeRO-Offload paper measured on a DGX-2 (its Table 4)"

    def params_per_s(self, k: ThroughputConstants) -> float:
        """Parameters a node's CPUs update per second."""
        if self is CpuOptimizer.DEEPSPEED_CPU_ADAM:
            return k.cpu_adam_params_per_s_deepspeed
        return k.cpu_adam_params_per_s_torch


def cpu_optimizer(config: TrainingConfig) -> CpuOptimizer | None:
    """The optimizer that steps on the CPU under this plan, or None when it steps on the GPU."""
    fsdp_moves_all = config.strategy is Strategy.FSDP and config.offload_params is not Offload.NONE
    if config.offload_optimizer is Offload.NONE and not fsdp_moves_all:
        return None
    if config.strategy is Strategy.FSDP:
        return CpuOptimizer.TORCH_ADAM
    if config.strategy is Strategy.ENGINE:
        return CpuOptimizer.ENGINE_CHUNKED_ADAM
    return CpuOptimizer.DEEPSPEED_CPU_ADAM


# Where a later measurement of the same stack disagrees: one source, warm-up in its means, so stated, not fitted.
DEEPSPEED_CPU_ADAM_2025 = (
    "; may be optimistic: DeepSpeed's 2025 blog timed ZeRO-2's CPU offload on 2 A100s at 2.4x what this charges "
    "(docs/accuracy.md)"
)
