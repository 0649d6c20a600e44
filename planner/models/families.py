"""The model-family registry: what the project knows about each HF `model_type`, as pure data, in one place.

Every part that needs per-family knowledge reads it from here (docs/architecture.md):
- planner/models/hf_config.py: which config reader parses the family, and the Llama-style defaults;
- planner/memory/arch_traits.py: what its blocks keep for backward (fused projections, QK-norm, ...);
- planner/emit/hf_model.py: the transformer block class FSDP wraps;
- planner/search/engine_layouts.py: whether our engine has a tensor/pipeline plan for it;
- backends/decoder_anatomy.py: that plan itself (module paths, column and row projections, split points);
- backends/weights/model_factory.py: the config keys a smoke test shrinks.
What an entry holds is defined in planner/models/family_entry.py; the Llama-style decoders' entries are in
planner/models/llama_style_families.py.
tests/test_model_families.py checks that every catalog model type has a complete entry and that the
block classes and module paths exist in transformers' own classes.
"""

from __future__ import annotations

from planner.models.family_entry import (
    GPT2_SIZE_KEYS,
    LLAMA_SIZE_KEYS,
    FamilyEntry,
    LlamaStyle,
    ParallelPlan,
    SizeKeys,
    Traits,
)
from planner.models.llama_style_families import LLAMA_STYLE_ENTRIES
from planner.models.spec import ModelFamily

__all__ = ["COMPONENT_TRAITS", "FAMILIES", "FamilyEntry", "LlamaStyle", "ParallelPlan", "SizeKeys", "Traits", "family_of",
           "parallel_model_types", "splits_over_tp"]  # fmt: skip


# DeepSeek-V2/V3 in our engine: pipeline stages and expert parallelism (their MoE blocks are Mixtral's layout beside
# shared experts, kept whole; their leading dense blocks are plain MLPs); no tensor parallelism.
DEEPSEEK_PIPELINE_PLAN = ParallelPlan(
    backbone="model",
    token_embedding="embed_tokens",
    layers="layers",
    final_norm="norm",
    layer_norms=(),
    column=(),
    row=(),
    attention="self_attn",
    extra_modules=("rotary_emb",),
    moe_block="mlp",
    tensor_parallel=False,
)

_ENTRIES = (
    FamilyEntry(
        model_type="gpt2",
        family=ModelFamily.DECODER_ONLY,
        task="causal-lm",
        reader="gpt2",
        block_class="GPT2Block",
        size_keys=GPT2_SIZE_KEYS,
        traits=Traits(fused_qkv=True),
        parallel_plan=ParallelPlan(
            backbone="transformer",
            token_embedding="wte",
            layers="h",
            final_norm="ln_f",
            layer_norms=("ln_1", "ln_2"),
            column=(("attn.c_attn", 3), ("mlp.c_fc", 1)),
            row=("attn.c_proj", "mlp.c_proj"),
            attention="attn",
            width_attributes=("split_size", "embed_dim"),
            extra_modules=("wpe", "drop"),
        ),
    ),
    FamilyEntry(
        model_type="gptj",
        family=ModelFamily.DECODER_ONLY,
        task="causal-lm",
        reader="gpt2",
        block_class="GPTJBlock",
        size_keys={**GPT2_SIZE_KEYS, "positions": ("n_positions",)},
        traits=Traits(fused_attention_kernel=False, softmax_fp32=True),
    ),
    FamilyEntry(
        model_type="opt",
        family=ModelFamily.DECODER_ONLY,
        task="causal-lm",
        reader="opt",
        block_class="OPTDecoderLayer",
        size_keys={
            "hidden": ("hidden_size", "word_embed_proj_dim"),
            "layers": ("num_hidden_layers",),
            "heads": ("num_attention_heads",),
            "ffn": ("ffn_dim",),
            "positions": ("max_position_embeddings",),
        },
        traits=Traits(softmax_fp32=True),
        parallel_plan=ParallelPlan(
            backbone="model.decoder",
            token_embedding="embed_tokens",
            layers="layers",
            final_norm="final_layer_norm",
            layer_norms=("self_attn_layer_norm", "final_layer_norm"),
            column=(("self_attn.q_proj", 1), ("self_attn.k_proj", 1), ("self_attn.v_proj", 1), ("fc1", 1)),
            row=("self_attn.out_proj", "fc2"),
            attention="self_attn",
            width_attributes=("embed_dim",),
            extra_modules=("embed_positions",),
        ),
    ),
    FamilyEntry(
        model_type="bloom",
        family=ModelFamily.DECODER_ONLY,
        task="causal-lm",
        reader="bloom",
        block_class="BloomBlock",
        size_keys={
            "hidden": ("hidden_size", "n_embed"),
            "layers": ("n_layer", "num_hidden_layers"),
            "heads": ("n_head", "num_attention_heads"),
            "ffn": (),
            "positions": (),
        },
        traits=Traits(fused_qkv=True, fused_attention_kernel=False, softmax_fp32=True),
    ),
    FamilyEntry(
        model_type="falcon",
        family=ModelFamily.DECODER_ONLY,
        task="causal-lm",
        reader="falcon",
        block_class="FalconDecoderLayer",
        size_keys={
            "hidden": ("hidden_size",),
            "layers": ("num_hidden_layers", "n_layer"),
            "heads": ("num_attention_heads", "n_head"),
            "ffn": ("ffn_hidden_size",),
            "positions": ("max_position_embeddings",),
        },
        traits=Traits(
            fused_qkv=True, fused_attention_kernel=False, fused_qkv_rotary=True, softmax_fp32=True, linear_subclass=True
        ),
    ),
    FamilyEntry(
        model_type="gpt_neox",
        family=ModelFamily.DECODER_ONLY,
        task="causal-lm",
        reader="gpt_neox",
        block_class="GPTNeoXLayer",
        size_keys=LLAMA_SIZE_KEYS,
        traits=Traits(fused_qkv=True, fused_qkv_rotary=True),
    ),
    # MPT (planner/models/mpt_config.py): one fused Wqkv. Planned as llm-foundry trains it (attn_impl flash:
    # FlashAttention with ALiBi slopes, no s x s scores); transformers' MptAttention is eager, hence no run folder.
    FamilyEntry(
        model_type="mpt",
        family=ModelFamily.DECODER_ONLY,
        task="causal-lm",
        reader="mpt",
        block_class="MptBlock",
        size_keys={
            "hidden": ("d_model",),
            "layers": ("n_layers",),
            "heads": ("n_heads",),
            "ffn": (),
            "positions": ("max_seq_len",),
        },
        traits=Traits(fused_qkv=True),
        emit_refusal="transformers' MptForCausalLM runs eager attention and builds a bias-free 4 x d_model MLP "
        "whatever the config says (expansion_ratio, no_bias, learned_pos_emb), so a run folder would not train what "
        "was planned; run the plan's layout with llm-foundry's MPT (attn_impl flash) in your own training code",
    ),
    *LLAMA_STYLE_ENTRIES,
    *(
        FamilyEntry(
            model_type=name,
            family=ModelFamily.ENCODER_ONLY,
            task="masked-lm",
            reader="bert",
            block_class=block,
            size_keys={**LLAMA_SIZE_KEYS},
        )
        for name, block in (("bert", "BertLayer"), ("roberta", "RobertaLayer"))
    ),
    FamilyEntry(  # ViT: a pre-norm encoder over image patches + CLS; eager softmax in fp32 like Llama's
        model_type="vit",
        family=ModelFamily.ENCODER_ONLY,
        task="image-classification",
        reader="vit",
        block_class="ViTLayer",
        size_keys={**LLAMA_SIZE_KEYS, "positions": ("image_size",)},
        traits=Traits(softmax_fp32=True),
    ),
    FamilyEntry(
        model_type="t5",
        family=ModelFamily.ENCODER_DECODER,
        task="seq2seq-lm",
        reader="t5",
        block_class="T5Block",
        size_keys={
            "hidden": ("d_model",),
            "layers": ("num_layers", "num_decoder_layers"),
            "heads": ("num_heads",),
            "ffn": ("d_ff",),
            "positions": (),
        },
        traits=Traits(softmax_fp32=True, mlp_dropout=True, loss_in_logits_dtype=True, mlp_output_fp32=True),
    ),
    FamilyEntry(  # Whisper: eager softmax in the input dtype; dropout (default 0) after attention and MLP
        model_type="whisper",
        family=ModelFamily.ENCODER_DECODER,
        task="speech-seq2seq",
        reader="whisper",
        block_class="WhisperEncoderLayer,WhisperDecoderLayer",
        size_keys={
            "hidden": ("d_model",),
            "layers": ("encoder_layers", "decoder_layers"),
            "heads": ("encoder_attention_heads", "decoder_attention_heads"),
            "ffn": ("encoder_ffn_dim", "decoder_ffn_dim"),
            "positions": ("max_target_positions",),
        },
        traits=Traits(loss_in_logits_dtype=True),
    ),
    FamilyEntry(  # LLaVA-1.5: a CLIP tower and a projector before a Llama-style LLM, whose traits it keeps
        model_type="llava",
        family=ModelFamily.DECODER_ONLY,
        task="image-text-to-text",
        reader="llava",
        block_class="LlamaDecoderLayer,CLIPEncoderLayer",
        size_keys={**LLAMA_SIZE_KEYS},  # inside text_config
        traits=Traits(softmax_fp32=True),
    ),
    *(
        FamilyEntry(  # DeepSeek: latent attention, shared + routed experts; eager softmax in fp32 like Llama's
            model_type=name,
            family=ModelFamily.DECODER_ONLY,
            task="causal-lm",
            reader="deepseek",
            block_class=block,
            size_keys={**LLAMA_SIZE_KEYS},
            # q/k heads (nope + rope) are wider than v heads: SDPA's flash kernel needs equal head dims, so the
            # math path runs and keeps the scores (traced: benchmarks/memory/trace_configs.py, deepseek-*).
            traits=Traits(
                softmax_fp32=True, shared_expert=True, fused_attention_kernel=False, peft_adapts_experts=True
            ),
            parallel_plan=plan,
        )
        for name, block, plan in (
            ("deepseek_v2", "DeepseekV2DecoderLayer", DEEPSEEK_PIPELINE_PLAN),
            ("deepseek_v3", "DeepseekV3DecoderLayer", DEEPSEEK_PIPELINE_PLAN),
        )
    ),
    FamilyEntry(  # CLIP: text and vision transformers of CLIPEncoderLayer blocks, eager softmax in fp32
        model_type="clip",
        family=ModelFamily.ENCODER_ONLY,
        task="contrastive-image-text",
        reader="clip",
        block_class="CLIPEncoderLayer",
        size_keys={**LLAMA_SIZE_KEYS},  # inside text_config
        traits=Traits(softmax_fp32=True),
    ),
)

FAMILIES: dict[str, FamilyEntry] = {entry.model_type: entry for entry in _ENTRIES}

# Model types that appear only inside a composite model, with what their blocks keep for backward:
# LLaVA's CLIP tower runs eager softmax in fp32 (traced: benchmarks/memory/memory_per_layer.py, llava rows).
COMPONENT_TRAITS: dict[str, Traits] = {"clip_vision_model": Traits(softmax_fp32=True)}


def family_of(model_type: str) -> FamilyEntry | None:
    return FAMILIES.get(model_type)


def parallel_model_types() -> frozenset[str]:
    """The model types our engine's pipeline parallelism can split (and its tensor parallelism, but for those
    whose plan says tensor_parallel=False)."""
    return frozenset(entry.model_type for entry in _ENTRIES if entry.parallel_plan is not None)


def splits_over_tp(model_type: str) -> bool:
    """Whether our engine's tensor parallelism splits this model type."""
    entry = FAMILIES.get(model_type)
    return entry is not None and entry.parallel_plan is not None and entry.parallel_plan.tensor_parallel
