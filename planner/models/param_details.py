"""The small per-architecture facts that move a parameter count (planner/models/param_formula.py counts with them).

ParameterDetails holds what a config says beyond the planner's dimensions (OPT's two spare position rows,
BERT's token-type table, gpt-oss's expert biases...); hf_config.py reads them from a config, and
default_details() derives them from a model_type when only a spec is at hand.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from planner.models.spec import ModelArchitecture


class ParameterDetails(BaseModel):
    """Per-architecture facts that change the count but not the planner's formulas."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built on first use: a catalog model's plan makes none

    # Hidden-sized norms in each block (T5 decoder blocks add one for cross-attention).
    norms_per_layer: int = Field(default=2, ge=0)
    # Whether a LayerNorm has a bias; None: it does (MPT's no_bias drops them, from every norm and Linear).
    norm_bias: bool | None = None
    # Per-head RMSNorm on queries and keys (Qwen3, Gemma 3).
    qk_norm: bool = False
    # Bias on the attention output projection; None follows attention_bias (Qwen2 biases q/k/v only).
    attention_output_bias: bool | None = None
    # Modules stored as one Linear; this changes only largest_layer.
    fused_qkv: bool = False
    fused_gate_up: bool = False
    # OPT's learned position table has 2 rows more than max_position_embeddings.
    position_offset: int = Field(default=0, ge=0)
    # BERT's segment embeddings (RoBERTa keeps a table of one).
    token_type_vocab_size: int = Field(default=0, ge=0)
    # A norm right after the embeddings (BLOOM, BERT).
    embedding_norm: bool = False
    # Token embeddings narrower than hidden_size, with project_in/project_out Linears (OPT-350m).
    embedding_projection_dim: int = Field(default=0, ge=0)
    # Final norms: one per stack; BERT has none, OPT-350m (post-norm) none, T5 two.
    final_norms: int = Field(default=1, ge=0)
    # BERT/RoBERTa base models end in a dense+tanh pooler.
    pooler: bool = False
    # T5: one (buckets x heads) table in the first block of each stack.
    relative_attention_buckets: int = Field(default=0, ge=0)
    # GPT-J's lm_head has a bias.
    lm_head_bias: bool = False
    # Qwen2-MoE: an always-on shared expert (gated MLP) plus a 1-output sigmoid gate (DeepSeek's has no gate).
    shared_expert_ffn_size: int = Field(default=0, ge=0)
    shared_expert_gate: bool = True
    # Blocks of an MoE model using the dense MLP (width ffn_size), e.g. Qwen2-MoE mlp_only_layers.
    dense_layers: int = Field(default=0, ge=0)
    # Vision encoders (ViT): the patch projection (a conv of channels x patch^2 x hidden, with bias) and the
    # CLS token replace the token table; the classifier (hidden x labels + labels) replaces the LM head.
    patch_embedding_params: int = Field(default=0, ge=0)
    classifier_params: int = Field(default=0, ge=0)
    # Whisper: the key projections have no bias, and two convolutions (mel_bins -> hidden, hidden -> hidden,
    # kernel 3, with biases) turn audio frames into encoder positions.
    key_bias: bool = True
    frontend_params: int = Field(default=0, ge=0)
    # gpt-oss: biases on every expert's fused gate/up and down projections and on the router, and one learned
    # attention-sink logit per head.
    expert_bias: bool = False
    router_bias: bool = False
    attention_sinks: bool = False


def default_details(arch: ModelArchitecture) -> ParameterDetails:
    """Parameter details implied by the model_type, for when no config is at hand.

    Exact for the catalog models; for a config, hf_config.py reads the few
    details that vary within a model_type (OPT-350m's projection, Falcon's norm
    count, BERT's type_vocab_size, Qwen2-MoE's shared expert size).
    """
    model_type = arch.model_type
    if model_type == "gpt2":
        return ParameterDetails(fused_qkv=True)
    if model_type == "opt":
        return ParameterDetails(position_offset=2)
    if model_type in ("qwen2", "qwen2_moe"):
        # Qwen2-MoE's shared expert; specs written before the spec carried it had it at ffn_size.
        shared = (arch.shared_expert_ffn_size or arch.ffn_size) if model_type == "qwen2_moe" else 0
        return ParameterDetails(attention_output_bias=False, shared_expert_ffn_size=shared)
    if model_type in ("qwen3", "qwen3_moe"):
        return ParameterDetails(qk_norm=True)
    if model_type == "gpt_oss":
        return ParameterDetails(expert_bias=True, router_bias=True, attention_sinks=True)
    if model_type in ("deepseek_v2", "deepseek_v3", "llama4_text"):  # an ungated shared expert, some dense blocks
        return ParameterDetails(
            shared_expert_ffn_size=arch.shared_expert_ffn_size, shared_expert_gate=False, dense_layers=arch.dense_layers
        )
    if model_type == "gemma2":
        return ParameterDetails(norms_per_layer=4)
    if model_type == "gemma3_text":
        return ParameterDetails(norms_per_layer=4, qk_norm=True)
    if model_type == "phi3":
        return ParameterDetails(fused_qkv=True, fused_gate_up=True)
    if model_type == "falcon":
        # New-architecture Falcon (40B, 180B: grouped kv heads) has separate attention and MLP norms.
        grouped = 1 < arch.num_kv_heads < arch.num_heads
        one_norm = arch.parallel_attention_mlp and not grouped
        return ParameterDetails(fused_qkv=True, norms_per_layer=1 if one_norm else 2)
    if model_type == "bloom":
        return ParameterDetails(fused_qkv=True, embedding_norm=True)
    if model_type == "gpt_neox":
        return ParameterDetails(fused_qkv=True)
    if model_type == "mpt":  # no_bias takes the biases off every Linear and LayerNorm alike
        return ParameterDetails(fused_qkv=True, norm_bias=arch.attention_bias)
    if model_type == "gptj":
        return ParameterDetails(norms_per_layer=1, lm_head_bias=True)
    if model_type in ("bert", "roberta"):
        return ParameterDetails(
            token_type_vocab_size=2 if model_type == "bert" else 1,
            embedding_norm=True,
            final_norms=0,
            pooler=True,
        )
    if model_type == "t5":
        return ParameterDetails(final_norms=2, relative_attention_buckets=32)
    if model_type == "whisper":
        return whisper_details(arch.hidden_size, arch.mel_bins)
    if model_type == "clip_vision_model":  # LLaVA's tower: pre- and post-LayerNorm, a bias-free patch conv
        return ParameterDetails(
            final_norms=1,
            embedding_norm=True,
            patch_embedding_params=arch.patch_values * arch.hidden_size + arch.hidden_size,
        )
    if model_type == "vit":
        hidden, labels = arch.hidden_size, arch.vocab_size
        return ParameterDetails(
            final_norms=1,
            patch_embedding_params=arch.patch_values * hidden + 2 * hidden,  # conv weight and bias, CLS token
            classifier_params=hidden * labels + labels,
        )
    return ParameterDetails()


def whisper_details(hidden: int, mel_bins: int) -> ParameterDetails:
    convolutions = 3 * mel_bins * hidden + hidden + 3 * hidden * hidden + hidden
    return ParameterDetails(final_norms=2, key_bias=False, frontend_params=convolutions)
