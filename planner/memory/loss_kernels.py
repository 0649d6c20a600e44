"""What the cross-entropy loss over the vocabulary keeps, per logit, by the kernel a training stack runs it with.

The logits are the step's largest activation at long sequences and large vocabularies (Llama 3 8B at 16k tokens:
16k x 128k logits), so what the loss holds of them moves the peak by gigabytes. Three kernels, each read in its
code and, where it runs here, traced (tests/test_loss_kernels.py):

- EAGER: torch's `cross_entropy` on an fp32 copy of the logits, as transformers' causal-LM loss and torchtitan's
  eager loss run it: log-softmax keeps its fp32 output (4 bytes a logit) until backward; at backward start that
  output, the fp32 gradient nll_loss writes and log-softmax's fp32 input gradient are live at once (12), before
  the cast back to 16 bits. Traced on Llama, GPT-2 and OPT (docs/accuracy.md, "Memory").
- MEGATRON: Megatron-LM's vocab-parallel cross-entropy on an fp32 copy of the logits: it takes the max, exp
  and the division in place and saves that one fp32 softmax (4); backward writes the gradient into the saved
  tensor in place, and autograd casts it to the logits' 16 bits (+2). Read, not traced (Megatron is not
  installed here): megatron/mpu/cross_entropy.py at e270f68a (Megatron-LM 2021; the same in BigScience's
  Megatron-DeepSpeed at 8387ae17) subtracts the max in place, as Megatron-Core does since 2024-06
  (megatron/core/tensor_parallel/cross_entropy.py at d98e8a64); Megatron-Core from 2022-09 to 2024-06 and
  Microsoft's Megatron-DeepSpeed since a2a476e1 (2023-08-23) subtract it into a new fp32 tensor, so the forward
  holds two fp32 copies for a moment: the forward's end counts that one, for both. Megatron-Bridge's recipes run
  Transformer Engine's fused cross-entropy instead (`cross_entropy_fusion_impl = "te"`), not read: this count is
  an upper bound there.
- FUSED: one kernel over the 16-bit logits that keeps them and each row's logsumexp, and writes their gradient in
  backward: flash-attn's CrossEntropyLoss, llm-foundry's default `loss_fn: fused_crossentropy` (at v0.2.8 and
  v1.0.9 flash_attn/losses/cross_entropy.py saves `(logits, lse, labels_local)` and csrc/xentropy's backward
  allocates `at::empty_like(logits_)` unless in place; at v2.3.2 its Triton kernel saves `(logits, lse, labels)`
  and allocates `torch.empty_like(logits)` unless `inplace_backward`, which llm-foundry leaves off); and
  torch.compile of the eager loss
  (torchtitan compiles its loss with the model since bbb1b616e, 2025-04-02), whose inductor graph saves the
  16-bit input and two fp32 numbers a row and whose backward allocates only the 16-bit gradient (traced here).

Liger's chunked loss and the 16-bit loss of T5 and Whisper, which depend on more than the kernel, stay in
activation_batch.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class LossKernel(str, Enum):
    EAGER = "eager"
    MEGATRON = "megatron"
    FUSED = "fused"


@dataclass(frozen=True)
class LossBytes:
    """Bytes per logit (of this rank's vocabulary shard) that the loss holds."""

    saved: float  # from the forward to the backward (a GPipe stage holds one per micro-batch in flight)
    forward_end: float  # at the forward's end, the logits included
    backward_start: float  # while the loss's backward runs


def loss_bytes(kernel: LossKernel, width: int) -> LossBytes:
    """Per logit, at `width` bytes for the logits themselves (2 in 16-bit or mixed training, 4 in fp32)."""
    upcast = 4 if width != 4 else 0  # the fp32 copy; none when the logits are fp32 already
    if kernel is LossKernel.EAGER:
        return LossBytes(saved=4, forward_end=4 + width + upcast, backward_start=12)
    if kernel is LossKernel.MEGATRON:  # the out-of-place subtraction's second fp32 tensor at the forward's end
        return LossBytes(saved=4, forward_end=width + upcast + 4, backward_start=4 + (width if width != 4 else 0))
    return LossBytes(saved=width, forward_end=width, backward_start=2 * width)


# What the memory estimate's "temporaries" source says of the loss, by kernel.
LOSS_TEMPORARIES = {
    LossKernel.EAGER: "fp32 log-softmax over the vocabulary and its gradients",
    LossKernel.MEGATRON: (
        "Megatron-LM's vocab-parallel cross-entropy, one fp32 softmax with its gradient written in place (read in "
        "its code)"
    ),
    LossKernel.FUSED: (
        "a fused cross-entropy kernel, the 16-bit logits and their gradient (flash-attn's read in its code, "
        "torch.compile's traced)"
    ),
}
