"""The planned kernel stack on a transformers model: eager, torch.compile of each block, or Liger's kernels.

Applied after activation checkpointing and before FSDP wrapping (torchtitan's order: TP, CP, AC, compile,
FSDP). Compiling block by block keeps one compiled graph for every identical block; a graph break (a data-
dependent branch in a model) falls back to eager for that part, as torch.compile does. Liger patches the
model's RMSNorm, rotary, SwiGLU and loss with its Triton kernels: GPUs only, and the `liger` extra.
"""

from __future__ import annotations

from typing import Any

from planner.errors import UserInputError


def apply_kernels(model: Any, kernels: str, device_type: str) -> Any:
    """Compile each repeated block in place, or apply Liger's patches; the model itself is returned."""
    if kernels == "eager":
        return model
    if kernels == "compile":
        from backends.decoder_anatomy import repeated_blocks

        blocks = repeated_blocks(model)
        if not blocks:
            raise UserInputError(f"--kernels compile: {type(model).__name__} has no repeated blocks to compile")
        for block in blocks:
            block.compile()
        return model
    if device_type != "cuda":
        raise UserInputError("--kernels liger: Liger's kernels are Triton GPU kernels; use --kernels compile on CPU")
    try:
        from liger_kernel.transformers.monkey_patch import _apply_liger_kernel_to_instance
    except ImportError:
        raise UserInputError("--kernels liger needs Liger Kernel: pip install 'hardware-selector[liger]'") from None
    _apply_liger_kernel_to_instance(model=model)
    return model
