"""The typed description of a model that every estimate starts from.

A ModelSpec carries two kinds of facts: the architecture (dimensions the
memory and FLOP formulas need) and the parameter counts. Counts say where they
came from, because a count built from the real transformers class on the meta
device is exact while one from a formula is an approximation.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ModelFamily(str, Enum):
    DECODER_ONLY = "decoder-only"
    ENCODER_ONLY = "encoder-only"
    ENCODER_DECODER = "encoder-decoder"


class MlpKind(str, Enum):
    # Two matrices (up, down) with a pointwise activation: GPT-2, OPT, BERT, T5 v1.0.
    STANDARD = "standard"
    # Three matrices (gate, up, down): SwiGLU (Llama) or GeGLU (Gemma, T5 v1.1).
    GATED = "gated"


ParamCountSource = Literal["meta-device", "formula"]


class ParamCounts(BaseModel):
    """Parameter counts of a model, tied weights counted once."""

    model_config = ConfigDict(frozen=True)

    total: int = Field(ge=0)
    trainable: int = Field(ge=0)
    # Parameters one token passes through; equals total for dense models.
    active_per_token: int = Field(ge=0)
    # Input embedding (and a separate output head, when untied) plus learned positions.
    embedding: int = Field(ge=0)
    # Largest number of parameters owned directly by one module: what ZeRO-3 must
    # gather at once, as DeepSpeed's estimators define it.
    largest_layer: int = Field(ge=0)
    source: ParamCountSource
    # "transformers 5.23.0" for meta-device counts, the formula's name otherwise.
    source_detail: str = ""


class ModelArchitecture(BaseModel):
    """What a model is, before any parameter count exists: every dimension the formulas read.

    The config readers (planner/models/hf_config.py) build one and param_formula counts from it;
    ModelSpec is this plus the counts, so each field is declared here once. Fields a reader may
    leave out take a plain decoder's values: num_kv_heads 0 means num_heads, head_dim 0 means
    hidden_size // num_heads.
    """

    # Built on first use (the config readers'): its vision_tower names ModelSpec, not defined yet, so building it
    # here failed part-way through its fields, ~1% of `plan`'s instructions for nothing.
    model_config = ConfigDict(frozen=True, defer_build=True)

    name: str = "custom"
    hf_id: str | None = None
    aliases: tuple[str, ...] = ()
    family: ModelFamily = ModelFamily.DECODER_ONLY
    model_type: str = "custom"  # the HF config's model_type, e.g. "llama"
    transformers_class: str = ""  # e.g. "LlamaForCausalLM"

    hidden_size: int = Field(gt=0)
    # All transformer blocks; for encoder-decoder models the sum of both stacks.
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

    # Details that change parameter and activation counts between architectures.
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    # "none": no position signal at all (NoPE; an MPT config with neither ALiBi nor a learned table).
    position_embedding: Literal["learned", "rotary", "alibi", "relative", "none"] = "learned"
    attention_bias: bool = False
    mlp_bias: bool = False
    # GPT-J/NeoX/Falcon compute attention and MLP from the same input in parallel.
    parallel_attention_mlp: bool = False
    # Sliding-window or chunked attention: `windowed_layers` of the layers attend to the last `attention_window`
    # tokens only, so a serving KV cache keeps no more of them (planner/models/attention_window.py); 0: none.
    attention_window: int = Field(default=0, ge=0)
    windowed_layers: int = Field(default=0, ge=0)
    chunked_attention: bool = False  # Llama 4: the window is a chunk a token attends inside, half of it on average
    # Dropout probabilities during training: each > 0 keeps a 1-byte mask per element.
    hidden_dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    attention_dropout: float = Field(default=0.0, ge=0.0, lt=1.0)

    # False for a bare encoder trained for sentence embeddings (architectures BertModel): no
    # head over the vocabulary, so no logits and no loss over them (docs/models-and-hardware.md).
    output_head: bool = True

    # Vision encoders (ViT): pixel values per patch token (channels x patch^2); the sequence is the
    # patches plus a CLS token (max_position_embeddings) and vocab_size the classifier's labels.
    patch_values: int = Field(default=0, ge=0)
    # Speech encoder-decoders (Whisper): the encoder reads a fixed window of audio, not the text. Two
    # convolutions turn 2 x encoder_seq_len frames of mel_bins values into encoder_seq_len positions,
    # which every encoder block and every cross-attention sees; seq_len is the decoder's text.
    mel_bins: int = Field(default=0, ge=0)
    encoder_seq_len: int = Field(default=0, ge=0)

    # LLaVA-style models: the vision tower (a CLIP ViT spec), the LLM positions each image fills
    # (part of seq_len), and the projector's parameters between the two.
    vision_tower: ModelSpec | None = None
    image_tokens: int = Field(default=0, ge=0)
    projector_params: int = Field(default=0, ge=0)

    # Mixture of experts; num_experts == 0 means a dense model.
    num_experts: int = Field(default=0, ge=0)
    experts_per_token: int = Field(default=0, ge=0)
    expert_ffn_size: int = Field(default=0, ge=0)
    # DeepSeek / Llama 4: always-on shared experts (one gated MLP of this width; 0: none, or Qwen2-MoE's, of
    # ffn_size), and the blocks that keep a dense MLP of ffn_size (DeepSeek's first ones, Maverick's every other).
    shared_expert_ffn_size: int = Field(default=0, ge=0)
    dense_layers: int = Field(default=0, ge=0)
    # Llama 4: queries and keys L2-normalised in fp32, without weights, after the rotary embedding.
    qk_l2_norm: bool = False

    # Multi-head latent attention (DeepSeek-V2/V3): queries through a q_lora_rank bottleneck (0: a plain
    # projection), keys and values from one kv_lora_rank latent plus a shared rotary key of
    # qk_rope_head_dim; head_dim is the query/key head (nope + rope), v_head_dim the value head.
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


class ModelSpec(ModelArchitecture):
    """Architecture and size of one model, independent of how it is trained.

    A spec is complete: the fields below have no default here (they keep their place in the
    field order, which plan.json shows).
    """

    model_config = ConfigDict(frozen=True, defer_build=False)  # every catalog model is one: built here

    name: str
    family: ModelFamily
    model_type: str
    transformers_class: str
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    mlp_kind: MlpKind
    max_position_embeddings: int = Field(gt=0)
    tied_embeddings: bool

    params: ParamCounts
    # Where the spec came from: "catalog", a config path, "dimensions" or "parameter count".
    origin: str = "catalog"

    @model_validator(mode="after")
    def _check_consistency(self) -> ModelSpec:
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        encoder_decoder = self.family is ModelFamily.ENCODER_DECODER
        if encoder_decoder and self.num_encoder_layers + self.num_decoder_layers != self.num_layers:
            raise ValueError("num_layers must equal num_encoder_layers + num_decoder_layers")
        if bool(self.mel_bins) != bool(self.encoder_seq_len) or (self.mel_bins and not encoder_decoder):
            raise ValueError("mel_bins and encoder_seq_len describe an audio encoder-decoder; give both or neither")
        if self.num_experts and not 0 < self.experts_per_token <= self.num_experts:
            raise ValueError("experts_per_token must be between 1 and num_experts")
        return self

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def length_limit(self) -> int | None:
        """The longest sequence the model attends: its position table (learned) or the context its config states
        (rotary, relative); None where nothing caps it, ALiBi or no positions (docs/models-and-hardware.md)."""
        return None if self.position_embedding in ("alibi", "none") else self.max_position_embeddings

    @property
    def modality(self) -> Literal["text", "image", "audio", "image-text"]:
        """What the model reads: images (ViT patches), audio (Whisper's mel frames), images with text
        (LLaVA) or text."""
        if self.vision_tower is not None:
            return "image-text"
        return "image" if self.patch_values else "audio" if self.mel_bins else "text"

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def kv_size(self) -> int:
        """Width of the key (or value) projection: kv_heads x head_dim."""
        return self.num_kv_heads * self.head_dim

    def beyond_trained_positions(self, seq_len: int) -> str | None:
        """A note when `seq_len` passes the positions a rotary model was trained on (config.json's
        max_position_embeddings): it runs, as training at that length does, but RoPE was never trained there, so
        the model needs its positions scaled (rope_scaling) or its quality suffers. Learned positions are refused
        instead (TrainingConfig.check_against: there is no embedding past them); ALiBi and relative buckets
        extrapolate by design, so they get none."""
        trained = self.max_position_embeddings
        if self.position_embedding != "rotary" or seq_len <= trained:
            return None
        return (
            f"seq {seq_len:,} is {seq_len / trained:.1f}x {self.name}'s {trained:,} trained positions "
            f"(config.json max_position_embeddings, rotary): past them RoPE needs scaling (rope_scaling: linear, "
            f"dynamic or YaRN, or continued training at the longer length), or quality suffers"
        )
