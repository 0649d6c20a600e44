"""What the training stack, not the config, decides of a step's memory.

The memory estimate counts the tensors transformers' modules keep (traced: docs/accuracy.md, "Memory"); two things
another stack does differently are counted as that stack does them, each read in its code:

- loss: the kernel its cross-entropy runs with, which decides what the loss holds of the logits
  (loss_kernels.py);
- checkpoints_to_cpu: under full activation checkpointing, how many checkpoints per block DeepSpeed's
  cpu_checkpointing copies to CPU memory in the forward and back before the block's recomputation (the ZeRO-Infinity
  paper's example sets it: planner/throughput/implementation.py, which also charges the copies' time). The GPU then
  holds one block's checkpoints, the one in flight, and the node's CPU memory the rest.

planner/throughput/implementation.py's presets say which each codebase runs (Implementation.stack_memory); ours
is OURS: the eager loss, checkpoints on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.memory.loss_kernels import LossKernel


@dataclass(frozen=True)
class StackMemory:
    loss: LossKernel = LossKernel.EAGER
    checkpoints_to_cpu: int = 0


OURS = StackMemory()
