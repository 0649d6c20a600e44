"""Op-level selective checkpointing's policy for torch.utils.checkpoint: keep every second matmul's output.

Inside one checkpointed block, the outputs of the 1st, 3rd, 5th, ... matmul (counted afresh in each block's
forward and again, in the same order, in its recomputation) and of the fused attention kernel are saved; every
other op is recomputed in backward. This is torchtitan's `selective_ac_option = "op"` rule, extended to biased
linears (addmm) so that a model's bias does not shift which outputs are kept. planner/memory/op_checkpointing.py
counts what it keeps; tests/test_op_checkpointing.py checks gradients against no checkpointing and the kept bytes
against a trace.
"""

from __future__ import annotations

from typing import Any


def _ops() -> tuple[frozenset, frozenset]:
    import torch

    aten = torch.ops.aten
    # linear reaches a dispatch mode as mm or addmm on CUDA and the CPU; a backend that registers it as one op
    # (torchtitan lists it for those) counts it the same.
    matmuls = frozenset({aten.mm.default, aten.addmm.default, aten.linear.default})
    attention_kernels = frozenset(
        {
            aten._scaled_dot_product_flash_attention.default,
            aten._scaled_dot_product_efficient_attention.default,
            aten._scaled_dot_product_cudnn_attention.default,
            aten._scaled_dot_product_flash_attention_for_cpu.default,
        }
    )
    return matmuls, attention_kernels


def op_checkpoint_contexts() -> Any:
    """A fresh (forward, recompute) context pair for one checkpointed call: pass as `context_fn`."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    matmuls, attention_kernels = _ops()
    counts = {False: 0, True: 0}  # matmuls seen so far, in the forward and in the recomputation

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if func in matmuls:
            counts[ctx.is_recompute] += 1
            kept = counts[ctx.is_recompute] % 2 == 1
            return CheckpointPolicy.MUST_SAVE if kept else CheckpointPolicy.PREFER_RECOMPUTE
        if func in attention_kernels:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)
