"""Which kernels run a block's element-wise work: a fused stack or transformers' eager modules.

The constants are fitted on llm-foundry's MPT (one kernel per LayerNorm, no
rotary), and the published Megatron-LM runs use fused LayerNorm, bias-GeLU and
rotary kernels: both are the FUSED stack. Every strategy this project runs
(DDP, FSDP, DeepSpeed and our engine) trains transformers' modules in eager
mode, the HF_EAGER stack, where two pieces of a Llama-style block are chains of
small kernels instead of one:

- RMSNorm (LlamaRMSNorm and its copies): cast to fp32, square, mean, rsqrt,
  multiply, cast back, multiply by the weight.
- Rotary embedding (apply_rotary_pos_emb): q·cos, rotate_half (negate a half,
  concatenate), ·sin, add; for q and for k.

LayerNorm, GELU and SiLU are single torch kernels in both stacks, so GPT-2- or
MPT-shaped models cost the same under either. The extra HBM traffic is
counted from those op chains (bytes read + written per element of the
normalised or rotated tensor, 16-bit activations), above the 4 bytes (one read,
one write) a fused kernel moves; backward repeats it twice, like the rest of
the element-wise work (compute.py). ASSUMED: counted from the modules' code
(transformers 5.x models/llama/modeling_llama.py: LlamaRMSNorm.forward,
rotate_half, apply_rotary_pos_emb), not measured.
"""

from __future__ import annotations

from enum import Enum

from planner.models.flops import ModelShape
from planner.training_config import TrainingConfig


class KernelStack(str, Enum):
    FUSED = "fused"  # llm-foundry MPT, Megatron-LM, Megatron-DeepSpeed: one kernel per norm and rotary
    # transformers modules run eagerly: what our backends train; where attention is not fused, transformers'
    # eager_attention_forward, whose s x s chain attention_chain.py charges (traced).
    HF_EAGER = "hf-eager"
    # Megatron-LM of September 2019: fused LayerNorm (apex) and a scripted GeLU, but an unfused attention-softmax
    # chain whose extra s x s passes attention_chain.py charges (the ZeRO and ZeRO-Offload papers' code).
    MEGATRON_2019 = "megatron-2019"
    # Megatron-DeepSpeed (Microsoft's 2021 and BigScience's 2022 forks): fused kernels, but attention dropout (p = 0.1
    # by default) after the fused softmax, one more s x s pass each way; with ALiBi (BigScience's BLOOM) the scores'
    # baddbmm also copies the bias out to s x s first (attention_chain.py).
    MEGATRON_DEEPSPEED = "megatron-deepspeed"
    MEGATRON_DEEPSPEED_ALIBI = "megatron-deepspeed-alibi"
    # Megatron-LM v1.1.5 as DeepSpeedExamples' Megatron-LM-v1.1.5-ZeRO3 runs it (the ZeRO-Infinity paper's code): fused
    # LayerNorm and bias-GeLU, but its example script turns no softmax fusion on, so the scores go through an in-place
    # masked_fill_, torch's softmax and attention dropout (p = 0.1): 2 more s x s passes each way (attention_chain.py).
    MEGATRON_V115 = "megatron-v1.1.5"
    # Megatron-LM of 2021-2022 (the `megatron` preset): the same fused softmax followed by attention dropout (p = 0.1
    # by default) as Megatron-DeepSpeed, whose attention it is (attention_chain.py).
    MEGATRON_LM = "megatron-lm"


# Bytes per element beyond a fused kernel's 4 (see the module docstring):
# RMSNorm: to(fp32) 2+4, pow 4+4, mean 4, x*rsqrt 4+4, to(bf16) 4+2, *weight 2+2 = 36, minus 4.
RMSNORM_EXTRA_BYTES = 32.0
# Rotary, per element of q and k: x*cos 2+2, neg(half) 1+1, cat 2+2, *sin 2+2, add 4+2 = 20, minus 4.
ROTARY_EXTRA_BYTES = 16.0

STACK_SOURCES = {
    KernelStack.HF_EAGER: (
        "assumed: our strategies run transformers modules eagerly (unfused RMSNorm and rotary traffic added, "
        "planner/throughput/kernel_stack.py; where attention is not fused, transformers' eager attention chain, its "
        "extra s x s writes by precision (5 each way under autocast) at the element-wise rate: traced, "
        "planner/throughput/attention_chain.py); the constants were fitted on a fused stack"
    ),
    KernelStack.FUSED: "fused kernel stack (llm-foundry / Megatron-style), as the constants were fitted",
    KernelStack.MEGATRON_2019: (
        "assumed: Megatron-LM of September 2019, fused norms but an unfused attention softmax: 4 more s x s "
        "writes a forward, 3 a backward, at the element-wise rate (traced: planner/throughput/attention_chain.py)"
    ),
    KernelStack.MEGATRON_DEEPSPEED: (
        "assumed: Megatron-DeepSpeed, fused kernels but attention dropout at its default p = 0.1: 1 more s x s write "
        "a forward, 1 a backward, at the element-wise rate (traced: planner/throughput/attention_chain.py)"
    ),
    KernelStack.MEGATRON_LM: (
        "assumed: Megatron-LM, fused kernels but attention dropout at its default p = 0.1: 1 more s x s write a "
        "forward, 1 a backward, at the element-wise rate (traced: planner/throughput/attention_chain.py)"
    ),
    KernelStack.MEGATRON_DEEPSPEED_ALIBI: (
        "assumed: BigScience's Megatron-DeepSpeed with ALiBi, attention dropout p = 0.1 and the bias copied into the "
        "scores: 2 more s x s writes a forward, 1 a backward, at the element-wise rate (planner/throughput/"
        "attention_chain.py)"
    ),
    KernelStack.MEGATRON_V115: (
        "assumed: Megatron-LM v1.1.5 as DeepSpeedExamples' ZeRO-3 example runs it (no softmax fusion flag): the "
        "mask, softmax and attention dropout p = 0.1 as torch ops, 2 more s x s writes a forward, 2 a backward, at "
        "the element-wise rate (traced: planner/throughput/attention_chain.py)"
    ),
}


def unfused_bytes_per_row(shape: ModelShape, config: TrainingConfig, stack: KernelStack) -> float:
    """Extra HBM bytes one block's forward moves per token under `stack`."""
    if stack is not KernelStack.HF_EAGER:
        return 0.0
    tp = config.tensor_parallel
    hidden_split = tp if config.sequence_parallel else 1
    extra = shape.norms_per_block * shape.hidden / hidden_split * RMSNORM_EXTRA_BYTES if shape.rmsnorm else 0.0
    if shape.rotary:
        extra += (shape.query_width + shape.kv_width) / tp * ROTARY_EXTRA_BYTES
    return extra
