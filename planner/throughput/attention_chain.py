"""The s x s passes an unfused attention-softmax chain adds to the eager attention path's two.

compute.py charges the eager (materialised-scores) attention two s x s writes a forward: the scores and the
probabilities, which is what a fused scale-mask-softmax kernel does. The Megatron-LM code of September 2019,
which the ZeRO (2020) and ZeRO-Offload (2021) papers ran (DeepSpeedExamples' `Megatron-LM` folder,
mpu/transformer.py at commit 5426d18a, lines 127-140), takes the scores through separate fp16 torch ops:
QK^T, `/ math.sqrt(head_dim)`, `torch.mul(scores, ltor_mask)`, `- 10000.0 * (1.0 - ltor_mask)`, softmax,
attention dropout (p = 0.1). Traced in benchmarks/accuracy/attention_chain_traffic.py (a TorchDispatchMode
counting each aten op's s x s reads and writes, fp16) against the two-write fused reference:

- forward: 6 s x s tensors written against 2, so 4 more (the scale, the mask multiply, the subtraction, the
  dropout);
- backward: 5 against 2, so 3 more (dropout's, the mask multiply's and the scale's gradients; the
  subtraction's gradient passes through).

ASSUMED (one assumption, nothing fitted): each extra write costs what the estimator charges any element-wise
value written (`elementwise_seconds`, its fitted passes per element included), in the forward, the backward
and, under activation checkpointing, the recomputed forward (that code checkpoints every layer,
mpu/transformer.py lines 406-412). The trace's bytes (17 more per s x s element forward, 13 backward) are
fewer than four and three of those element-wise writes move; docs/accuracy.md ("The mechanism, read in the
code") gives the rows' errors under both.

Megatron-DeepSpeed (the `megatron-deepspeed` preset: MT-NLG on Microsoft's fork, BLOOM on BigScience's) fuses
the scale, mask and softmax into one kernel at these rows' sequence, but runs attention dropout after it
(p = 0.1 by default in both forks, and BLOOM kept it: tr11-176B-ml/README.md "The default Megatron-LM dropout
settings are inherited"); with ALiBi (BLOOM) the scores are a baddbmm over the [b x heads, 1, s] bias, which
PyTorch's CUDA baddbmm first copies out to s x s. Traced in
benchmarks/accuracy/megatron_deepspeed_attention_traffic.py (file, line and commit there):

- dropout alone: forward 3 s x s writes against 2, backward 3 against 2: 1 more each way;
- ALiBi and dropout: forward 4 against 2, backward 3 against 2.

The same assumption as for the 2019 chain: each extra write costs an element-wise value written.

Megatron-LM's own code of 2021-2022 (the `megatron` preset: its 2021 and 2022 papers' runs) is the attention
Microsoft's fork copied: github.com/NVIDIA/Megatron-LM at e270f68a (2021-04-02), megatron/model/transformer.py
lines 271-275 (`torch.baddbmm` with beta 0 into an empty tensor, the scale as alpha), 302-303 (FusedScaleMaskSoftmax: one kernel at
16 < s <= 2048, megatron/model/fused_softmax.py lines 132-140, on unless `--no-masked-softmax-fusion`) and 307-308 (`self.attention_dropout(attention_probs)`, built at line 178), with `--attention-dropout` defaulting
to 0.1 (megatron/arguments.py line 333); at 739cb43d (2022-05-24), CoreAttention, lines 214 and 264-266. Korthikanti
et al. (2022) count its mask and output in the activations of those runs (Table 2's 5as/h term: softmax output,
dropout mask, dropout output; reproduced by tests/test_memory_korthikanti.py). The chain is the traced `dropout` one: 1 more s x s write each way, charged alike.

transformers' own eager attention (the `hf-eager` stack: our engine, FSDP, DDP and DeepSpeed plans, where the
scores are materialised: `--attention eager`, or a family SDPA's fused kernels cannot take) is traced in
benchmarks/accuracy/transformers_attention_traffic.py by calling transformers 5.24.0's `eager_attention_forward`
itself (models/gpt2/modeling_gpt2.py lines 55-73; models/llama/modeling_llama.py lines 180-202, which most families
copy): the product times the scale, the mask added, softmax, the cast back, attention dropout, each its own kernel.
The float causal mask is in the input embeddings' dtype (masking_utils.py line 965). Counted in
`elementwise_seconds`' unit, a value written at the compute width (an fp32 s x s tensor two 16-bit values), beyond
the reference's 2 each way:

- under autocast (DDP's bf16-mixed and fp16-mixed: fp32 embeddings, so an fp32 mask that promotes the scores;
  softmax in CUDA autocast's fp32 list), GPT-2 and Llama alike: 5 more each way, 6 with attention dropout;
- with 16-bit weights (pure bf16, and the mixed precisions of FSDP, DeepSpeed's fp16 and bf16 engines and our engine,
  which run the module in 16 bits without autocast: kernel_stack.chain_precision, the MLP chain's rule too) the mask
  is 16-bit: GPT-2's softmax stays 16-bit, 2 more forward and 1 backward (3 and 2 with dropout);
  Llama's `softmax(dtype=torch.float32)` on a bf16 CUDA tensor is a cast then an fp32 softmax (ATen's
  SoftMax.cpp fuses the cast for fp16 only), 6 and 5 (7 and 6 with dropout); the families with the `softmax_fp32`
  trait are charged Llama's chain, the others GPT-2's;
- in fp32, both: 2 more forward and 1 backward (3 and 2 with dropout).

Gemma-2's soft-capping of the scores (`/ softcap`, tanh, `* softcap`: models/gemma2/modeling_gemma2.py lines 195-198)
adds 3 more each way in every precision (its trace less Llama's). Attention dropout is the model's
(`attention_dropout` > 0: GPT-2's `attn_pdrop` 0.1; Llama's 0.0). Families whose eager attention is their own code
(BLOOM's ALiBi baddbmm, GPT-J's fp32 product, Falcon's) are charged the chain their `softmax_fp32` trait picks, not
traced. Charged on
causal decoders (the trace's causal mask); encoders, whose padding mask may be absent, keep the fused reference.

Why the element-wise rate and not the chains' bytes at the HBM rate (docs/accuracy.md, "The s x s charge: bytes at
the HBM rate, tried"): charging every materialised s x s tensor by its traced bytes at 88% of the catalog
bandwidth (the fraction an A100 kernel reaches, measured) makes every stack that materialises its scores worse.

Megatron-LM v1.1.5 as DeepSpeedExamples' Megatron-LM-v1.1.5-ZeRO3 runs it (at 2cd968f2; the ZeRO-Infinity paper's
code, the `megatron-v1.1.5` kernel stack its rows name): the example script turns neither softmax fusion on, so
FusedScaleMaskSoftmax takes its torch branch: the scores' baddbmm (beta 0), an in-place masked_fill_, torch's
softmax in fp16, attention dropout (p = 0.1). Traced in benchmarks/accuracy/megatron_v115_attention_traffic.py
(file, line and commit there): forward 4 s x s writes against 2, backward 4 against 2: 2 more each way. With the
masked_fill_ on a view of the GEMM's output, as the code has it, today's autograd adds the in-place op's CopySlices
and the view's as_strided backward (6 more backward writes, one of them an allocation); the run's PyTorch is not
stated, so those are traced and not charged, and the 2 are a lower bound.
"""

from __future__ import annotations

from planner.models.flops import ModelShape
from planner.throughput.constants import ThroughputConstants
from planner.throughput.kernel_stack import KernelStack, chain_precision
from planner.throughput.kernels import Device, elementwise_seconds
from planner.training_config import TrainingConfig

# s x s tensors written beyond the fused reference's, per attention forward and backward, by kernel stack
# (benchmarks/accuracy/attention_chain_traffic.py: "extra s x s writes of the 2019 chain: forward 4, backward 3").
# (benchmarks/accuracy/megatron_deepspeed_attention_traffic.py: "extra s x s writes of dropout: forward 1, backward 1",
# "of alibi_dropout: forward 2, backward 1").
EXTRA_SCORE_WRITES: dict[KernelStack, tuple[int, int]] = {
    KernelStack.MEGATRON_2019: (4, 3),
    KernelStack.MEGATRON_DEEPSPEED: (1, 1),
    KernelStack.MEGATRON_LM: (1, 1),  # the same dropout chain (module docstring)
    KernelStack.MEGATRON_DEEPSPEED_ALIBI: (2, 1),
    # (benchmarks/accuracy/megatron_v115_attention_traffic.py: "extra s x s writes of v1.1.5: forward 2, backward 2").
    KernelStack.MEGATRON_V115: (2, 2),
}
# transformers' eager attention (hf-eager) by (precision, fp32 softmax, attention dropout), from
# benchmarks/accuracy/transformers_attention_traffic.py's "extra s x s writes of NAME": autocast's unadorned names,
# pure bf16's "@bf16" (gpt2 without the fp32 softmax, llama with it), fp32's "@fp32".
HF_EAGER_SCORE_WRITES: dict[tuple[str, bool, bool], tuple[int, int]] = {
    ("autocast", False, False): (5, 5),  # gpt2_no_dropout
    ("autocast", False, True): (6, 6),  # gpt2
    ("autocast", True, False): (5, 5),  # llama
    ("autocast", True, True): (6, 6),  # llama_dropout
    ("bf16", False, False): (2, 1),  # gpt2_no_dropout@bf16
    ("bf16", False, True): (3, 2),  # gpt2@bf16
    ("bf16", True, False): (6, 5),  # llama@bf16
    ("bf16", True, True): (7, 6),  # llama_dropout@bf16
    ("fp32", False, False): (2, 1),  # gpt2_no_dropout@fp32
    ("fp32", False, True): (3, 2),  # gpt2@fp32
    ("fp32", True, False): (2, 1),  # llama@fp32
    ("fp32", True, True): (3, 2),  # llama_dropout@fp32
}
# Gemma-2's soft-capping of the scores (`/ softcap`, tanh, `* softcap`) on top, in every precision: "gemma2" less
# "llama" (8 - 5 each way under autocast; @bf16 9 - 6 and 8 - 5; @fp32 5 - 2 and 4 - 1).
SOFTCAP_SCORE_WRITES = (3, 3)


def extra_score_writes(stack: KernelStack, shape: ModelShape, config: TrainingConfig) -> tuple[int, int]:
    """(forward, backward) s x s values the stack's attention writes beyond the fused reference's (module docstring)."""
    if stack is not KernelStack.HF_EAGER:
        return EXTRA_SCORE_WRITES.get(stack, (0, 0))
    if not shape.causal:
        return 0, 0  # traced with the causal mask only
    precision = chain_precision(config)
    forward, backward = HF_EAGER_SCORE_WRITES[precision, shape.softmax_fp32, shape.attention_dropout]
    if shape.score_softcapping:
        forward, backward = forward + SOFTCAP_SCORE_WRITES[0], backward + SOFTCAP_SCORE_WRITES[1]
    return forward, backward


def score_chain_seconds(
    stack: KernelStack,
    shape: ModelShape,
    config: TrainingConfig,
    score_elements: float,
    device: Device,
    k: ThroughputConstants,
) -> tuple[float, float]:
    """(forward, backward) seconds the stack's extra s x s writes take over `score_elements` scores."""
    forward, backward = extra_score_writes(stack, shape, config)
    if not forward and not backward:
        return 0.0, 0.0
    return (
        elementwise_seconds(device, forward * score_elements, k),
        elementwise_seconds(device, backward * score_elements, k),
    )
