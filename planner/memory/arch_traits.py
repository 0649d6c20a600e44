"""What a transformers implementation keeps for backward that dimensions alone do not say.

The Korthikanti et al. formula counts a GPT block of 2020. Real HF blocks
differ: fused or separate q/k/v projections (each separate projection under
autocast saves its own 16-bit copy of the input), RMSNorm that upcasts its
input to fp32, gated MLPs, Python-level GELU that saves several tensors,
dropout inside the MLP (T5), and models whose attention cannot use a fused
kernel at all. These traits were read off the transformers source and checked
against op-level traces (benchmarks/memory/compare_memory.py, docs/accuracy.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.memory.spec_cache import per_spec
from planner.models.families import COMPONENT_TRAITS, Traits, family_of
from planner.models.spec import MlpKind, ModelFamily, ModelSpec


@dataclass(frozen=True)
class ArchTraits:
    qkv_projections: int  # separate input projections feeding attention (1 when fused)
    mlp_input_projections: int  # gate+up separate = 2, fused or standard MLP = 1
    norms_per_block: int
    rmsnorm_upcasts: bool  # HF RMSNorm computes in fp32 and keeps the fp32 input
    fused_attention: bool  # can use SDPA's flash/memory-efficient kernel
    activation_saved_tensors: int  # tensors of FFN width the activation keeps besides the down projection's input
    softmax_fp32: bool  # eager attention computes softmax in fp32 whatever the input (Llama family)
    mlp_dropout: bool  # dropout between the MLP's activation and its down projection (T5)
    hidden_dropouts_per_block: int  # residual dropouts per block when hidden dropout > 0
    causal_float_mask: bool  # eager attention adds a float causal mask, promoting scores to its dtype
    qkv_slices_pinned: bool  # v is a slice of a fused qkv output that outlives the rotary q and k
    qk_norm: bool  # RMSNorm on q and k before the rotary embedding
    norm_fp32_weighting: bool  # Gemma's RMSNorm multiplies by (1 + weight) in fp32 before casting back
    score_softcapping: bool  # tanh soft-capping of the scores keeps one more s x s tensor (Gemma-2)
    shared_expert: bool  # an always-on gated MLP beside the routed experts (Qwen2-MoE, DeepSeek)
    shared_expert_gate: bool  # its output scaled by a sigmoid gate (Qwen2-MoE)
    linear_router: bool  # the router is an nn.Linear (Llama 4's), which LoRA's all-linear adapts
    # LoRA's all-linear adapts the fused experts and the router (planner/memory/lora_targets.py)
    peft_adapts_experts: bool
    linear_subclass: bool  # the blocks' linears subclass nn.Linear (Falcon's): QLoRA leaves them 16-bit
    mlp_output_fp32: bool  # T5's wo, kept in fp32 by transformers: out of QLoRA's 4 bits
    loss_in_logits_dtype: bool  # cross-entropy in the logits' own dtype, no fp32 upcast (T5, Whisper)


# Tensors of FFN width an activation function keeps besides its output:
# relu's output is the tensor the down projection saves anyway; exact GELU keeps
# its input; NewGELU ("gelu_new") is Python: x, tanh(...), 0.5*x and 1+tanh(...).
_ACTIVATION_SAVED = {"gelu_new": 4, "gelu_fast": 4, "quick_gelu": 2, "relu": 0}


@per_spec
def arch_traits(spec: ModelSpec) -> ArchTraits:
    """The family's traits (planner/models/families.py) applied to this config's choices."""
    entry = family_of(spec.model_type)
    traits = entry.traits if entry is not None else COMPONENT_TRAITS.get(spec.model_type, Traits())
    gated = spec.mlp_kind is MlpKind.GATED
    if traits.four_norms:
        norms = 4  # pre- and post-norms around attention and MLP
    elif spec.parallel_attention_mlp and spec.model_type == "falcon":
        norms = 1  # attention and MLP read one shared norm
    else:
        norms = 2
    return ArchTraits(
        qkv_projections=1 if traits.fused_qkv else 3,
        mlp_input_projections=2 if gated and not traits.fused_gate_up else 1,
        norms_per_block=norms,
        rmsnorm_upcasts=spec.norm == "rmsnorm",
        fused_attention=traits.fused_attention_kernel,
        activation_saved_tensors=_ACTIVATION_SAVED.get(spec.activation, 1) + (3 if traits.clamped_swiglu else 0),
        softmax_fp32=traits.softmax_fp32,
        mlp_dropout=traits.mlp_dropout and spec.hidden_dropout > 0,
        hidden_dropouts_per_block=2 if spec.hidden_dropout > 0 else 0,
        causal_float_mask=spec.family is ModelFamily.DECODER_ONLY,
        qkv_slices_pinned=traits.fused_qkv_rotary and spec.position_embedding == "rotary",
        qk_norm=traits.qk_norm,
        norm_fp32_weighting=traits.norm_fp32_weighting,
        score_softcapping=traits.score_softcapping,
        shared_expert=traits.shared_expert,
        shared_expert_gate=traits.shared_expert_gate,
        linear_router=traits.linear_router,
        peft_adapts_experts=traits.peft_adapts_experts,
        linear_subclass=traits.linear_subclass,
        mlp_output_fp32=traits.mlp_output_fp32,
        loss_in_logits_dtype=traits.loss_in_logits_dtype,
    )
