"""Which kernels run a block's element-wise work: a fused stack or transformers' eager modules.

The constants are fitted on llm-foundry's MPT (one kernel per LayerNorm, no
rotary), and the published Megatron-LM runs use fused LayerNorm, bias-GeLU and
rotary kernels: both are the FUSED stack. Every strategy this project runs
(DDP, FSDP, DeepSpeed and our engine) trains transformers' modules in eager
mode, the HF_EAGER stack, where two pieces of a Llama-style block are chains of
small kernels instead of one (and some families' MLP activation, below):

- RMSNorm (LlamaRMSNorm and its copies): cast to fp32, square, mean, rsqrt,
  multiply, cast back, multiply by the weight.
- Rotary embedding (apply_rotary_pos_emb): q·cos, rotate_half (negate a half,
  concatenate), ·sin, add; for q and for k.

LayerNorm is a single torch kernel in both stacks. The extra HBM traffic is
counted from those op chains (bytes read + written per element of the
normalised or rotated tensor, 16-bit activations), above the 4 bytes (one read,
one write) a fused kernel moves; backward repeats it twice, like the rest of
the element-wise work (compute.py). ASSUMED: counted from the modules' code
(transformers 5.x models/llama/modeling_llama.py: LlamaRMSNorm.forward,
rotate_half, apply_rotary_pos_emb), not measured.

The MLP activation is one kernel each way in a fused stack (Megatron's bias-GeLU,
torch's gelu(approximate="tanh")) and in transformers for `gelu`, `gelu_pytorch_tanh`,
`silu` and `relu` (nn.functional.gelu, silu, nn.ReLU), but three of transformers'
activations are Python chains of element-wise ops over the b x s x ffn tensor
(transformers 5.24.0, activations.py): `gelu_new` (NewGELUActivation, lines 59-66:
GPT-2, GPT-J, T5 v1.1's gated-gelu), `gelu_fast` (FastGELUActivation, lines 95-101:
GPT-NeoX-20B), `quick_gelu` (QuickGELUActivation, lines 104-111: CLIP), and BLOOM's
BloomGelu (models/bloom/modeling_bloom.py lines 112-164, its backward a chain too).
Traced in benchmarks/accuracy/transformers_activation_traffic.py (each aten op's bytes,
forward and backward apart, less the one-kernel reference's), by precision: under
CUDA autocast `pow` is in the fp32 list, so gelu_new's chain runs in fp32 from the
pow on and its output is cast back for the next linear; only DDP trains under
autocast (backends/adapters/torch_step.py `uses_autocast`; FSDP2's
MixedPrecisionPolicy, DeepSpeed's engine and ours cast the weights to 16 bits, the
chain then runs in 16 bits, as planner/memory/activations.py has it). Charged at
the HBM rate, forward and backward as traced (not the twice-the-forward of the rest).
The SwiGLU/GeGLU multiply (act(gate) * up) is one kernel in both stacks and is
charged already (compute.py's block elements: 3 x ffn gated, 2 x ffn not).
"""

from __future__ import annotations

from enum import Enum

from planner.models.flops import ModelShape
from planner.training_config import Precision, Strategy, TrainingConfig


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

# (forward, backward) bytes per element of the MLP activation beyond a one-kernel activation's (4 forward, 6 backward
# in 16 bits), by (activation, precision), from benchmarks/accuracy/transformers_activation_traffic.py's "extra bytes
# per element of NAME": autocast's unadorned names (16-bit input, pow in fp32), pure 16 bits' "@bf16", fp32's
# "@fp32". Activations not listed (gelu, gelu_pytorch_tanh, silu, relu traced at 0; others untraced) add nothing.
ACTIVATION_EXTRA_BYTES: dict[tuple[str, str], tuple[float, float]] = {
    ("gelu_new", "autocast"): (72.0, 112.0),
    ("gelu_new", "bf16"): (32.0, 50.0),
    ("gelu_new", "fp32"): (64.0, 100.0),
    ("gelu_fast", "autocast"): (38.0, 66.0),
    ("gelu_fast", "bf16"): (38.0, 66.0),
    ("gelu_fast", "fp32"): (76.0, 132.0),
    ("quick_gelu", "autocast"): (10.0, 22.0),
    ("quick_gelu", "bf16"): (10.0, 22.0),
    ("quick_gelu", "fp32"): (20.0, 44.0),
    ("bloom_gelu", "autocast"): (38.0, 82.0),
    ("bloom_gelu", "bf16"): (38.0, 82.0),
    ("bloom_gelu", "fp32"): (76.0, 164.0),
}

STACK_SOURCES = {
    KernelStack.HF_EAGER: (
        "assumed: our strategies run transformers modules eagerly (unfused RMSNorm and rotary traffic added, "
        "planner/throughput/kernel_stack.py; gelu_new, gelu_fast, quick_gelu and BLOOM's GeLU as their traced "
        "element-wise chains; where attention is not fused, transformers' eager attention chain, its "
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


def chain_precision(config: TrainingConfig) -> str:
    """How an eager element-wise chain runs, the MLP activation's here and the attention scores' (attention_chain.py):
    "autocast" (DDP's mixed precision: fp32 weights under torch.autocast), "fp32", or "bf16" (16-bit weights, no
    autocast: FSDP2's MixedPrecisionPolicy, DeepSpeed's fp16 and bf16 engines, which halve the module, our engine,
    pure bf16). One answer for both chains: the module's weights, not the chain, decide it."""
    if config.precision is Precision.FP32:
        return "fp32"
    return "autocast" if config.precision.is_mixed and config.strategy is Strategy.DDP else "bf16"


def activation_bytes_per_row(shape: ModelShape, config: TrainingConfig, stack: KernelStack) -> tuple[float, float]:
    """(forward, backward) extra HBM bytes one block's MLP activation moves per token under `stack` (module docstring)."""
    if stack is not KernelStack.HF_EAGER:
        return 0.0, 0.0
    forward, backward = ACTIVATION_EXTRA_BYTES.get((shape.activation, chain_precision(config)), (0.0, 0.0))
    width = shape.ffn * max(shape.experts_per_token, 1) / config.tensor_parallel
    return forward * width, backward * width
