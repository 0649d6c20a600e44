"""The Llama-style decoders of the model-family registry (planner/models/families.py assembles it).

One entry per HF model_type read by the Llama reader (planner/models/hf_config.py): RMSNorm, rotary positions,
a gated MLP and grouped key/value heads, with how each departs from Llama (LlamaStyle) and what its blocks keep
for backward (Traits) -- Mistral, Mixtral, Qwen2/3 and their MoE variants, gpt-oss, Llama 4, Gemma 1-3, Phi-3.
"""

from __future__ import annotations

from planner.models.family_entry import (
    LLAMA_PARALLEL_PLAN,
    LLAMA_SIZE_KEYS,
    FamilyEntry,
    LlamaStyle,
    ParallelPlan,
    Traits,
)
from planner.models.spec import ModelFamily

# Mixtral: Llama's attention split over tp; its sparse MoE block (router + fused experts) is the engine's expert
# parallelism, with each expert's ffn split over tp as well.
MIXTRAL_PARALLEL_PLAN = LLAMA_PARALLEL_PLAN.model_copy(
    update={
        "column": (("self_attn.q_proj", 1), ("self_attn.k_proj", 1), ("self_attn.v_proj", 1)),
        "row": ("self_attn.o_proj",),
        "moe_block": "mlp",
    }
)

# Qwen3: Llama's split, with the QK-norm of each head whole on every rank (its gradient summed over tp).
QWEN3_PARALLEL_PLAN = LLAMA_PARALLEL_PLAN.model_copy(update={"head_norms": ("self_attn.q_norm", "self_attn.k_norm")})
# Qwen3-MoE: Qwen3's attention and Mixtral's MoE block (a router and fused experts, no shared expert).
QWEN3_MOE_PARALLEL_PLAN = MIXTRAL_PARALLEL_PLAN.model_copy(update={"head_norms": QWEN3_PARALLEL_PLAN.head_norms})


def _llama_like(
    model_type: str,
    block: str,
    style: LlamaStyle,
    traits: Traits = Traits(softmax_fp32=True),
    plan: ParallelPlan | None = None,
    emit_refusal: str | None = None,
) -> FamilyEntry:
    return FamilyEntry(
        model_type=model_type,
        family=ModelFamily.DECODER_ONLY,
        task="causal-lm",
        reader="llama",
        block_class=block,
        size_keys=LLAMA_SIZE_KEYS,
        traits=traits,
        llama_style=style,
        parallel_plan=plan,
        emit_refusal=emit_refusal,
    )


LLAMA_STYLE_ENTRIES: tuple[FamilyEntry, ...] = (
    _llama_like(
        "llama",
        "LlamaDecoderLayer",
        LlamaStyle(
            transformers_class="LlamaForCausalLM",
            default_kv_heads=None,
            default_head_dim=None,
            default_positions=2048,
            tied_by_default=False,
        ),
        plan=LLAMA_PARALLEL_PLAN,
    ),
    _llama_like(
        "mistral",
        "MistralDecoderLayer",
        LlamaStyle(
            transformers_class="MistralForCausalLM",
            default_kv_heads=8,
            default_head_dim=None,
            default_positions=131072,
            tied_by_default=False,
            bias="none",
        ),
        plan=LLAMA_PARALLEL_PLAN,
    ),
    _llama_like(
        "mixtral",
        "MixtralDecoderLayer",
        LlamaStyle(
            transformers_class="MixtralForCausalLM",
            default_kv_heads=8,
            default_head_dim=None,
            default_positions=131072,
            tied_by_default=False,
            bias="none",
        ),
        traits=Traits(softmax_fp32=True, peft_adapts_experts=True),
        plan=MIXTRAL_PARALLEL_PLAN,
    ),
    _llama_like(
        "qwen2",
        "Qwen2DecoderLayer",
        LlamaStyle(
            transformers_class="Qwen2ForCausalLM",
            default_kv_heads=32,
            default_head_dim=None,
            default_positions=32768,
            tied_by_default=False,
            bias="qkv",
        ),
        plan=LLAMA_PARALLEL_PLAN,
    ),
    _llama_like(
        "qwen2_moe",
        "Qwen2MoeDecoderLayer",
        LlamaStyle(
            transformers_class="Qwen2MoeForCausalLM",
            default_kv_heads=16,
            default_head_dim=None,
            default_positions=32768,
            tied_by_default=False,
            bias="qkv_bias",
        ),
        traits=Traits(softmax_fp32=True, shared_expert=True, shared_expert_gate=True),
    ),
    _llama_like(
        "qwen3",
        "Qwen3DecoderLayer",
        LlamaStyle(
            transformers_class="Qwen3ForCausalLM",
            default_kv_heads=32,
            default_head_dim=128,
            default_positions=32768,
            tied_by_default=False,
        ),
        traits=Traits(softmax_fp32=True, qk_norm=True),
        plan=QWEN3_PARALLEL_PLAN,
    ),
    _llama_like(  # Qwen3-MoE: Qwen3's attention (QK-norm) with fine-grained routed experts, no shared expert
        "qwen3_moe",
        "Qwen3MoeDecoderLayer",
        LlamaStyle(
            transformers_class="Qwen3MoeForCausalLM",
            default_kv_heads=4,
            # transformers 5's Qwen3MoeConfig has no head_dim (its attention takes hidden / heads); Qwen3's has 128
            default_head_dim=None,
            default_positions=32768,
            tied_by_default=False,
        ),
        traits=Traits(softmax_fp32=True, qk_norm=True, peft_adapts_experts=True),
        plan=QWEN3_MOE_PARALLEL_PLAN,
    ),
    _llama_like(  # gpt-oss: biased attention with a learned sink per head (eager: SDPA has no sinks, softmax in
        # the input dtype), biased routed experts with a clamped SwiGLU, RMSNorm weighting in fp32
        "gpt_oss",
        "GptOssDecoderLayer",
        LlamaStyle(
            transformers_class="GptOssForCausalLM",
            default_kv_heads=8,
            default_head_dim=64,
            default_positions=131072,
            tied_by_default=False,
            bias_by_default=True,
        ),
        traits=Traits(fused_attention_kernel=False, norm_fp32_weighting=True, clamped_swiglu=True),
    ),
    _llama_like(  # Llama 4's text model: routed experts (sigmoid top-1) beside an ungated shared expert, dense
        # blocks interleaved (Maverick); q/k L2-normed without weights
        "llama4_text",
        "Llama4TextDecoderLayer",
        LlamaStyle(
            transformers_class="Llama4ForCausalLM",
            default_kv_heads=8,
            default_head_dim=128,
            default_positions=131072,
            tied_by_default=False,
        ),
        traits=Traits(softmax_fp32=True, shared_expert=True, linear_router=True),
        emit_refusal="transformers' Llama4TextMoe runs every expert on every token (the plan assumes routed experts, "
        "as torchtitan and Megatron-LM run them); run the plan's layout with a routed MoE implementation in your own "
        "training code",
    ),
    _llama_like(
        "gemma",
        "GemmaDecoderLayer",
        LlamaStyle(
            transformers_class="GemmaForCausalLM",
            default_kv_heads=16,
            default_head_dim=256,
            default_positions=8192,
            tied_by_default=True,
        ),
        traits=Traits(softmax_fp32=True, norm_fp32_weighting=True),
    ),
    _llama_like(
        "gemma2",
        "Gemma2DecoderLayer",
        LlamaStyle(
            transformers_class="Gemma2ForCausalLM",
            default_kv_heads=4,
            default_head_dim=256,
            default_positions=8192,
            tied_by_default=True,
            norms_per_layer=4,
        ),
        traits=Traits(
            softmax_fp32=True,
            four_norms=True,
            norm_fp32_weighting=True,
            score_softcapping=True,
            fused_attention_kernel=False,
        ),
    ),
    _llama_like(
        "gemma3_text",
        "Gemma3DecoderLayer",
        LlamaStyle(
            transformers_class="Gemma3ForCausalLM",
            default_kv_heads=4,
            default_head_dim=256,
            default_positions=131072,
            tied_by_default=True,
            norms_per_layer=4,
        ),
        traits=Traits(softmax_fp32=True, four_norms=True, norm_fp32_weighting=True, qk_norm=True),
    ),
    _llama_like(
        "phi3",
        "Phi3DecoderLayer",
        LlamaStyle(
            transformers_class="Phi3ForCausalLM",
            default_kv_heads=None,
            default_head_dim=None,
            default_positions=4096,
            tied_by_default=False,
            bias="none",
        ),
        traits=Traits(softmax_fp32=True, fused_qkv=True, fused_gate_up=True, fused_qkv_rotary=True),
    ),
)
