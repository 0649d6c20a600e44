"""The tiny models benchmarks/memory/memory_per_layer.py traces: one config per HF family, at n layers.

Inline families are built from their published HF configs with tiny dimensions; catalog families
take the catalog's config with the dimensions overridden. FAMILIES says which attention kernels
and checkpointing modes each is traced under.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.memory.per_layer_moe_models import MOE_OVERRIDES

REPO_ROOT = Path(__file__).resolve().parents[2]
CATALOG = REPO_ROOT / "planner" / "catalog" / "models"
H, HEADS, FFN, VOCAB, BATCH, SEQ = 256, 4, 1024, 512, 2, 256
VIT_TOKENS = (64 // 4) ** 2 + 1


LLAVA_IMAGE_TOKENS = (64 // 4) ** 2


def seq_for(family: str) -> int:
    """Tokens per sequence: SEQ for text, the patches and CLS token for ViT (fixed by its image), and for
    LLaVA the image's tokens followed by 64 of text."""
    return VIT_TOKENS if family == "vit" else LLAVA_IMAGE_TOKENS + 64 if family == "llava" else SEQ


PRECISIONS = ("fp32", "bf16-mixed", "bf16")

# Families built from their published HF configs with tiny dimensions.
INLINE = {
    "gpt2": lambda n: {
        "model_type": "gpt2",
        "n_layer": n,
        "n_embd": H,
        "n_head": HEADS,
        "vocab_size": VOCAB,
        "n_positions": 1024,
    },
    "opt": lambda n: {
        "model_type": "opt",
        "hidden_size": H,
        "ffn_dim": FFN,
        "num_hidden_layers": n,
        "num_attention_heads": HEADS,
        "vocab_size": VOCAB,
        "max_position_embeddings": 1024,
        "word_embed_proj_dim": H,
        "do_layer_norm_before": True,
        "dropout": 0.1,
        "attention_dropout": 0.0,
        "activation_function": "relu",
    },
    "llama": lambda n: {
        "model_type": "llama",
        "hidden_size": H,
        "intermediate_size": FFN,
        "num_hidden_layers": n,
        "num_attention_heads": HEADS,
        "num_key_value_heads": 2,
        "vocab_size": VOCAB,
        "max_position_embeddings": 1024,
    },
    "mixtral": lambda n: {
        "model_type": "mixtral",
        "hidden_size": H,
        "intermediate_size": FFN // 2,
        "num_hidden_layers": n,
        "num_attention_heads": HEADS,
        "num_key_value_heads": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "vocab_size": VOCAB,
    },
    "bert": lambda n: {
        "model_type": "bert",
        "hidden_size": H,
        "num_hidden_layers": n,
        "num_attention_heads": HEADS,
        "intermediate_size": FFN,
        "vocab_size": VOCAB,
    },
    # 64-pixel images in 4-pixel patches: 256 patches and the CLS token (VIT_TOKENS).
    "vit": lambda n: {
        "model_type": "vit",
        "hidden_size": H,
        "num_hidden_layers": n,
        "num_attention_heads": HEADS,
        "intermediate_size": FFN,
        "image_size": 64,
        "patch_size": 4,
        "num_labels": 10,
    },
    "t5": lambda n: {
        "model_type": "t5",
        "d_model": H,
        "d_kv": H // HEADS,
        "d_ff": FFN,
        "num_layers": n,
        "num_heads": HEADS,
        "vocab_size": VOCAB,
    },
    # A short audio window (128 positions from 256 mel frames) keeps the trace small; n layers in each stack.
    "whisper": lambda n: {
        "model_type": "whisper",
        "d_model": H,
        "encoder_layers": n,
        "decoder_layers": n,
        "encoder_attention_heads": HEADS,
        "decoder_attention_heads": HEADS,
        "encoder_ffn_dim": FFN,
        "decoder_ffn_dim": FFN,
        "max_source_positions": 128,
        "vocab_size": VOCAB,
        **{key: 1 for key in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")},
    },
    # CLIP: n layers in each tower (text of SEQ tokens, 64-pixel images in 4-pixel patches).
    "clip": lambda n: {
        "model_type": "clip",
        "architectures": ["CLIPModel"],
        "projection_dim": H,
        "text_config": {
            "hidden_size": H,
            "intermediate_size": FFN,
            "num_hidden_layers": n,
            "num_attention_heads": HEADS,
            "vocab_size": VOCAB,
            "max_position_embeddings": SEQ,
        },
        "vision_config": {
            "hidden_size": H,
            "intermediate_size": FFN,
            "num_hidden_layers": n,
            "num_attention_heads": HEADS,
            "image_size": 64,
            "patch_size": 4,
        },
    },  # fmt: skip
    # LLaVA: n CLIP layers in the tower (64-pixel images in 4-pixel patches) before a 2-layer Llama, so the
    # difference is one tower block over its 257 positions.
    "llava": lambda n: {
        "model_type": "llava",
        "image_token_index": VOCAB - 1,
        "pad_token_id": VOCAB - 2,
        "vision_feature_layer": -1,  # every tower block feeds the LLM, so each added one is trained
        "vision_config": {
            "model_type": "clip_vision_model",
            "hidden_size": H,
            "intermediate_size": FFN,
            "num_hidden_layers": n,
            "num_attention_heads": HEADS,
            "image_size": 64,
            "patch_size": 4,
        },
        "text_config": {
            "model_type": "llama",
            "hidden_size": H,
            "intermediate_size": FFN,
            "num_hidden_layers": 2,
            "num_attention_heads": HEADS,
            "vocab_size": VOCAB,
            "max_position_embeddings": 1024,
        },
    },
}
# Catalog families: the catalog config with these dimensions overridden (and its layer key).
TOKENS = {"bos_token_id": 1, "eos_token_id": 2}
CATALOG_OVERRIDES: dict[str, tuple[str, dict[str, Any]]] = {
    "phi-3-mini": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            num_attention_heads=HEADS,
            num_key_value_heads=HEADS,
            vocab_size=VOCAB,
            pad_token_id=0,
            **TOKENS,
        ),
    ),
    "gemma-2-2b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            num_attention_heads=HEADS,
            num_key_value_heads=2,
            head_dim=64,
            query_pre_attn_scalar=64,
            vocab_size=VOCAB,
        ),
    ),
    "gemma-3-1b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            num_attention_heads=HEADS,
            num_key_value_heads=1,
            head_dim=64,
            query_pre_attn_scalar=64,
            vocab_size=VOCAB,
        ),
    ),
    "falcon-7b": ("num_hidden_layers", dict(hidden_size=H, num_attention_heads=HEADS, vocab_size=VOCAB, **TOKENS)),
    "pythia-160m": (
        "num_hidden_layers",
        dict(hidden_size=H, intermediate_size=FFN, num_attention_heads=HEADS, vocab_size=VOCAB),
    ),
    "bloom-560m": ("n_layer", dict(n_embed=H, num_attention_heads=HEADS, vocab_size=VOCAB)),
    "qwen2.5-0.5b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            num_attention_heads=HEADS,
            num_key_value_heads=2,
            vocab_size=VOCAB,
            **TOKENS,
        ),
    ),
    "qwen3-8b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            num_attention_heads=HEADS,
            num_key_value_heads=2,
            head_dim=64,
            vocab_size=VOCAB,
            **TOKENS,
        ),
    ),
    "gpt-j-6b": ("n_layer", dict(n_embd=H, n_head=HEADS, rotary_dim=16, vocab_size=VOCAB, **TOKENS)),
    "mistral-7b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            num_attention_heads=HEADS,
            num_key_value_heads=2,
            vocab_size=VOCAB,
            **TOKENS,
        ),
    ),
    "gemma-7b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            num_attention_heads=HEADS,
            num_key_value_heads=HEADS,
            head_dim=64,
            vocab_size=VOCAB,
            **TOKENS,
        ),
    ),
    "roberta-base": (
        "num_hidden_layers",
        dict(hidden_size=H, intermediate_size=FFN, num_attention_heads=HEADS, vocab_size=VOCAB),
    ),
    **MOE_OVERRIDES,
}
_DROPPED_KEYS = (
    "quantization_config",
    "torch_dtype",
    "dtype",
    "_name_or_path",
    "transformers_version",
    "rope_scaling",
    "layer_types",
    "sliding_window",
    "use_sliding_window",
)
# (family, attentions, checkpointing modes); T5's attention is inline (no selective), a Whisper "layer" is one
# encoder and one decoder block, and
# BLOOM, GPT-J and Gemma-2 have no SDPA path in transformers.
FAMILIES = [
    *[(name, ("sdpa", "eager"), ("none", "selective")) for name in ("gpt2", "opt", "llama", "mixtral", "bert")],
    ("t5", ("eager",), ("none",)),
    ("vit", ("sdpa", "eager"), ("none",)),
    ("whisper", ("sdpa", "eager"), ("none",)),
    ("llava", ("sdpa", "eager"), ("none",)),
    ("clip", ("sdpa", "eager"), ("none",)),
    *[
        (name, ("sdpa",), ("none",))
        for name in ("phi-3-mini", "gemma-3-1b", "falcon-7b", "pythia-160m", "qwen2.5-0.5b", "qwen3-8b")
    ],
    *[(name, ("eager",), ("none",)) for name in ("gemma-2-2b", "bloom-560m", "gpt-j-6b")],
    *[(name, ("sdpa",), ("none",)) for name in ("mistral-7b", "gemma-7b", "roberta-base", "qwen1.5-moe-a2.7b")],
    *[(name, ("sdpa", "eager"), ("none",)) for name in ("deepseek-v2-lite", "deepseek-v3")],
    ("qwen3-30b-a3b", ("sdpa",), ("none",)),
    # Op-level checkpointing (--ac op) on dense blocks: separate and fused projections, with and without biases.
    *[(name, ("sdpa", "eager"), ("op",)) for name in ("gpt2", "opt", "llama")],
    *[(name, ("sdpa",), ("op",)) for name in ("phi-3-mini", "qwen2.5-0.5b")],
    ("gpt-oss-20b", ("eager",), ("none",)),  # attention sinks: transformers has no SDPA path for gpt-oss
    *[(name, ("sdpa",), ("none",)) for name in ("llama-4-scout", "llama-4-maverick")],
]


def model_config(family: str, layers: int) -> dict[str, Any]:
    if family in INLINE:
        return INLINE[family](layers)
    layer_key, overrides = CATALOG_OVERRIDES[family]
    config = json.loads((CATALOG / f"{family}.json").read_text(encoding="utf-8"))["config"]
    config = {key: value for key, value in config.items() if key not in _DROPPED_KEYS}
    return {**config, **overrides, layer_key: layers}
