"""The planned kernel stack on a transformers model: eager, torch.compile of each block, or Liger's kernels.

Applied after activation checkpointing and before FSDP wrapping (torchtitan's order: TP, CP, AC, compile,
FSDP). Compiling block by block keeps one compiled graph for every identical block; a graph break (a data-
dependent branch in a model) falls back to eager for that part, as torch.compile does. The loss is compiled
too: a decoder-only model computes it through transformers' `loss_function` (an fp32 copy of the logits,
log-softmax and NLL), which inductor fuses into kernels that keep the 16-bit logits and two fp32 numbers a row
for backward instead of the fp32 log-softmax, and write the gradient in 16 bits: 8 bytes a logit less at the
step's peak (planner/memory/loss_kernels.py, FUSED; tests/test_compiled_loss.py traces it). Encoder-decoders
compute their loss inline in forward; it stays eager, as the plan counts it. Liger patches the model's RMSNorm,
rotary, SwiGLU and loss with its Triton kernels: GPUs only, and the `liger` extra.
"""

from __future__ import annotations

from typing import Any

from planner.errors import UserInputError


def apply_kernels(model: Any, kernels: str, device_type: str) -> Any:
    """Compile each repeated block and the loss in place, or apply Liger's patches; the model itself is returned."""
    if kernels == "eager":
        return model
    if kernels == "compile":
        from backends.decoder_anatomy import repeated_blocks

        blocks = repeated_blocks(model)
        if not blocks:
            raise UserInputError(f"--kernels compile: {type(model).__name__} has no repeated blocks to compile")
        for block in blocks:
            block.compile()
        compile_loss(model)
        return model
    if device_type != "cuda":
        raise UserInputError("--kernels liger: Liger's kernels are Triton GPU kernels; use --kernels compile on CPU")
    try:
        from liger_kernel.transformers.monkey_patch import _apply_liger_kernel_to_instance
    except ImportError:
        raise UserInputError("--kernels liger needs Liger Kernel: pip install 'hardware-selector[liger]'") from None
    _apply_liger_kernel_to_instance(model=model)
    return model


def compile_loss(model: Any) -> None:
    """Put the model's loss under torch.compile, where transformers computes it through `loss_function` (its
    setter keeps the compiled function on the instance, which FSDP2's and DeepSpeed's wrapping leave in place).
    Every transformers model has the property; encoder-decoders (T5, Whisper) compute their loss inline instead,
    which stays eager, as the plan counts it (planner/memory/stack_memory.py)."""
    import torch

    if isinstance(getattr(type(model), "loss_function", None), property):
        model.loss_function = torch.compile(model.loss_function)


def compiled_or_eager(function: Any, kernels: str) -> Any:
    """`function` under torch.compile when the plan compiles, else itself: a loss the engine computes outside the
    model (context parallelism's summed token loss) runs as the model's own would."""
    if kernels != "compile":
        return function
    import torch

    return torch.compile(function)
