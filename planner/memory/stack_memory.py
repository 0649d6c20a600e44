"""What the training stack, not the config, decides of a step's memory.

The memory estimate counts the tensors transformers' modules keep (traced: docs/accuracy.md, "Memory"); two things
another stack does differently are counted as that stack does them, each read in its code:

- loss: the kernel its cross-entropy runs with, which decides what the loss holds of the logits
  (loss_kernels.py);
- checkpoints_to_cpu: under full activation checkpointing, how many checkpoints per block DeepSpeed's
  cpu_checkpointing copies to CPU memory in the forward and back before the block's recomputation (the ZeRO-Infinity
  paper's example sets it: planner/throughput/implementation.py, which also charges the copies' time). The GPU then
  holds one block's checkpoints, the one in flight, and the node's CPU memory the rest.
- unsharded_stage_under_pp: under pipeline parallelism with parameters sharded (FSDP2, ZeRO-3), whether each
  stage holds its parameters gathered and its gradients unreduced from the step's first forward to its last
  backward. torchtitan shards each block with `reshard_after_forward = False` when pipelining ("For PP, do not
  reshard after forward to avoid per-microbatch all-gathers", torchtitan/parallelisms/parallelize_llama.py at
  9dec370); torch's pipeline stages run every micro-batch's backward but the last with
  `set_reshard_after_backward(False)` and `set_requires_gradient_sync(False)` (torch/distributed/pipelining/
  stage.py, `backward_maybe_with_nosync`, in the torch installed here and in stored copies of earlier versions), and
  FSDP2 accumulates unreduced gradients in its reduce dtype (`to_accumulated_grad_if_needed`,
  torch/distributed/fsdp/_fully_shard/_fsdp_param.py), fp32 in torchtitan (`mixed_precision_reduce` defaults to
  float32, torchtitan/config_manager.py at 9dec370). So until the step's reduce-scatter the stage holds every
  parameter in the compute width and every trainable one's gradient in 4 bytes, beside the shards. Read, not
  traced; our engine refuses ZeRO-3 with pipelining.

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
    unsharded_stage_under_pp: bool = False


OURS = StackMemory()
