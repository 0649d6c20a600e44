"""What one entry of the model-family registry says (planner/models/families.py holds the entries).

Pure data, frozen: the config reader a family uses, its task, its transformer
block class, the config keys naming its sizes, what its blocks keep for
backward that the dimensions do not say (Traits), how a Llama-style family
departs from Llama (LlamaStyle), and where our engine's tensor and pipeline
parallelism find its parts (ParallelPlan).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from planner.models.spec import ModelFamily

Reader = Literal[
    "gpt2",
    "opt",
    "bloom",
    "falcon",
    "gpt_neox",
    "mpt",
    "llama",
    "bert",
    "t5",
    "vit",
    "whisper",
    "llava",
    "clip",
    "deepseek",
]
Task = Literal["causal-lm", "masked-lm", "seq2seq-lm", "image-classification", "speech-seq2seq", "image-text-to-text",
              "contrastive-image-text"]  # fmt: skip


class _Data(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LlamaStyle(_Data):
    """How a Llama-style model_type departs from Llama, as its transformers config class and modules do."""

    transformers_class: str
    default_kv_heads: int | None  # None: one kv head per attention head
    default_head_dim: int | None  # None: hidden_size // num_attention_heads
    default_positions: int
    tied_by_default: bool
    # "attention_bias": read it, all four projections; "qkv_bias": read it, q/k/v only;
    # "qkv": q/k/v always biased (Qwen2); "none": the module has no biases.
    bias: Literal["attention_bias", "qkv_bias", "qkv", "none"] = "attention_bias"
    bias_by_default: bool = False  # the config class's default for its attention_bias (gpt-oss: True)
    norms_per_layer: int = 2


class ParallelPlan(_Data):
    """Where the parts of a decoder live inside the HF causal LM, for tensor and pipeline parallelism.

    Paths inside a layer are relative to the layer. The pipeline splits the model at `layers`; tensor
    parallelism splits `column` projections by output (into `sections` fused blocks each) and `row`
    projections by input."""

    backbone: str  # attribute path from the CausalLM to the module holding the layers
    token_embedding: str  # relative to the backbone
    layers: str
    final_norm: str
    layer_norms: tuple[str, ...]  # norms that feed a column-parallel projection
    column: tuple[tuple[str, int], ...]  # (path, fused sections)
    row: tuple[str, ...]
    attention: str
    head_count_attributes: tuple[str, ...] = ("num_heads", "num_key_value_heads", "num_attention_heads")
    width_attributes: tuple[str, ...] = ()  # attention attributes holding the local projection width
    kv_projections: tuple[str, ...] = ()  # replicated, not split, when tp exceeds the key/value heads
    extra_modules: tuple[str, ...] = ()  # other backbone modules (positions, rotary)
    # Norms over each head's width inside the attention (Qwen3's QK-norm): whole on every rank, each rank's heads
    # giving part of their gradient, which is summed over tp.
    head_norms: tuple[str, ...] = ()
    # An MoE model's router + experts block inside a layer: its experts split over ep and their ffn over tp,
    # its router whole on every rank (backends/expert_parallel/tensor_parallel.py); "" for a dense MLP.
    moe_block: str = ""
    # False: the plan places the parts for pipeline (and expert) parallelism only, and tp is refused
    # (DeepSeek's latent attention, whose projections the column/row split does not describe).
    tensor_parallel: bool = True


# Where a Llama-style causal LM keeps its parts (transformers' LlamaForCausalLM layout, shared by Mistral and
# Qwen2): what the engine's tensor and pipeline parallelism split.
LLAMA_PARALLEL_PLAN = ParallelPlan(
    backbone="model",
    token_embedding="embed_tokens",
    layers="layers",
    final_norm="norm",
    layer_norms=("input_layernorm", "post_attention_layernorm"),
    column=(
        ("self_attn.q_proj", 1),
        ("self_attn.k_proj", 1),
        ("self_attn.v_proj", 1),
        ("mlp.gate_proj", 1),
        ("mlp.up_proj", 1),
    ),
    row=("self_attn.o_proj", "mlp.down_proj"),
    attention="self_attn",
    kv_projections=("self_attn.k_proj", "self_attn.v_proj"),
    extra_modules=("rotary_emb",),
)


class Traits(_Data):
    """What a block keeps for backward that its dimensions do not say (read off the transformers source and
    checked against op-level traces, docs/accuracy.md)."""

    fused_qkv: bool = False  # one projection makes q, k and v
    fused_gate_up: bool = False  # one projection makes the gate and up inputs of the MLP
    fused_attention_kernel: bool = True  # SDPA's flash / memory-efficient kernel applies
    fused_qkv_rotary: bool = False  # v is a slice of the fused output that outlives the rotary q and k
    qk_norm: bool = False  # RMSNorm on q and k before the rotary embedding
    softmax_fp32: bool = False  # eager attention computes softmax in fp32 whatever the input
    four_norms: bool = False  # pre- and post-norms around attention and MLP (Gemma-2/3)
    norm_fp32_weighting: bool = False  # RMSNorm multiplies by (1 + weight) in fp32 (Gemma)
    score_softcapping: bool = False  # tanh soft-capping keeps one more s x s tensor (Gemma-2)
    shared_expert: bool = False  # an always-on gated MLP beside the routed experts (Qwen2-MoE, DeepSeek)
    shared_expert_gate: bool = False  # ... scaled by a sigmoid gate of its own (Qwen2-MoE)
    linear_router: bool = False  # the router is an nn.Linear (Llama 4's), so PEFT's all-linear adapts it too
    # PEFT's all-linear adapts the fused experts and the router's weight: the families whose experts were nn.Linear
    # modules in transformers 4 (peft/utils/transformers_weight_conversion.py, planner/memory/lora_targets.py)
    peft_adapts_experts: bool = False
    # QLoRA: bitsandbytes replaces modules whose type is exactly nn.Linear: not Falcon's FalconLinear subclass, and
    # not T5's wo, which transformers keeps in fp32 (_keep_in_fp32_modules)
    linear_subclass: bool = False
    mlp_output_fp32: bool = False
    mlp_dropout: bool = False  # dropout between the MLP's activation and its down projection (T5)
    # gpt-oss: both halves clamped, gate * sigmoid(alpha * gate), then (up + 1) * that: three FFN-wide tensors
    # more than SiLU's gating keeps
    clamped_swiglu: bool = False
    loss_in_logits_dtype: bool = False  # cross-entropy on the logits as they are, no fp32 upcast (T5, Whisper)


# Config keys a family names its sizes with (the first present one is used); model_factory shrinks them.
SizeKeys = dict[str, tuple[str, ...]]
GPT2_SIZE_KEYS: SizeKeys = {
    "hidden": ("n_embd",),
    "layers": ("n_layer",),
    "heads": ("n_head",),
    "ffn": ("n_inner",),
    "positions": ("n_positions", "n_ctx"),
}
LLAMA_SIZE_KEYS: SizeKeys = {
    "hidden": ("hidden_size",),
    "layers": ("num_hidden_layers",),
    "heads": ("num_attention_heads",),
    "ffn": ("intermediate_size",),
    "positions": ("max_position_embeddings",),
}


class FamilyEntry(_Data):
    model_type: str
    family: ModelFamily
    task: Task
    reader: Reader
    # The repeated transformer block(s), transformers' _no_split_modules; comma-separated when the encoder's
    # and the decoder's differ (Whisper), as accelerate's fsdp_transformer_layer_cls_to_wrap takes them.
    block_class: str
    size_keys: SizeKeys
    traits: Traits = Traits()
    llama_style: LlamaStyle | None = None
    parallel_plan: ParallelPlan | None = None  # None: our engine has no tp/pp plan for it
    # Why a run folder (transformers' own modules) would not run what the plan assumes; None: it would.
    emit_refusal: str | None = None
