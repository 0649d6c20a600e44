"""ArchitectureDims: a model's dimensions before any parameter count exists (the fields ModelSpec carries).

planner/models/param_formula.py counts parameters from them and the config readers build them; `Architecture`
names what the formulas read: these dimensions, or a ModelSpec, which has the same field names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.models.spec import MlpKind, ModelFamily, ModelSpec


class ArchitectureDims(BaseModel):
    """The architecture fields of a ModelSpec, before any parameter count exists.

    Field names and meanings are ModelSpec's, so ModelSpec(**dims.model_dump(), ...)
    builds the spec. num_kv_heads defaults to num_heads and head_dim to
    hidden_size // num_heads.
    """

    model_config = ConfigDict(frozen=True)

    family: ModelFamily = ModelFamily.DECODER_ONLY
    model_type: str = "custom"
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_encoder_layers: int = Field(default=0, ge=0)
    num_decoder_layers: int = Field(default=0, ge=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(default=0, ge=0)  # 0: same as num_heads
    head_dim: int = Field(default=0, ge=0)  # 0: hidden_size // num_heads
    ffn_size: int = Field(gt=0)
    mlp_kind: MlpKind = MlpKind.STANDARD
    activation: str = "gelu"
    vocab_size: int = Field(gt=0)
    max_position_embeddings: int = Field(default=2048, gt=0)
    tied_embeddings: bool = True
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    position_embedding: Literal["learned", "rotary", "alibi", "relative"] = "learned"
    attention_bias: bool = False
    mlp_bias: bool = False
    parallel_attention_mlp: bool = False
    num_experts: int = Field(default=0, ge=0)
    experts_per_token: int = Field(default=0, ge=0)
    expert_ffn_size: int = Field(default=0, ge=0)
    # Vision encoders: the pixel values one patch token is projected from (channels x patch^2); 0 for text.
    patch_values: int = Field(default=0, ge=0)
    # Speech encoder-decoders (Whisper): mel bins per audio frame and the encoder's fixed positions.
    mel_bins: int = Field(default=0, ge=0)
    encoder_seq_len: int = Field(default=0, ge=0)
    # DeepSeek: shared experts and leading dense blocks; multi-head latent attention (ModelSpec says more).
    shared_expert_ffn_size: int = Field(default=0, ge=0)
    dense_layers: int = Field(default=0, ge=0)
    qk_l2_norm: bool = False
    q_lora_rank: int = Field(default=0, ge=0)
    kv_lora_rank: int = Field(default=0, ge=0)
    qk_rope_head_dim: int = Field(default=0, ge=0)
    v_head_dim: int = Field(default=0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _fill_derived(cls, values: dict) -> dict:
        if not isinstance(values, dict):
            return values
        values = dict(values)
        heads = values.get("num_heads")
        if not values.get("num_kv_heads"):
            values["num_kv_heads"] = heads
        if not values.get("head_dim") and isinstance(heads, int) and heads > 0:
            hidden = values.get("hidden_size")
            if isinstance(hidden, int) and hidden % heads:
                raise ValueError(f"hidden_size ({hidden}) is not a multiple of num_heads ({heads}); give head_dim")
            values["head_dim"] = hidden // heads if isinstance(hidden, int) else None
        return values


# What the formula reads: an ArchitectureDims before counting, or a ModelSpec after (same field names).
Architecture = ArchitectureDims | ModelSpec
