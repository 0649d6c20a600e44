"""The training steps we trace for ground truth (see benchmarks/memory/memory_trace.py).

Model configs are inline HF config dicts with the published shapes of each model
(not read from the catalog, so a trace result always means the same model). Dropout
values are the HF defaults of each family unless written here; memory_trace.py zeroes
the attention dropout for ``attention="sdpa"``.

The grid spans micro-batch 1–8, sequence 128–4096, fp32 / bf16-mixed / fp16-mixed /
bf16, activation checkpointing none/selective/full, AdamW / SGD / Adafactor, SDPA / eager, and
world size 1 and FSDP2 2, 4, 8, 64. ``fast=True`` marks tiny configs for a quick check.
"""

from __future__ import annotations

from typing import Any

from .memory_trace import TraceConfig
from .trace_family_models import (  # noqa: F401 (re-exported for benchmarks and tests)
    CLIP_B16,
    CLIP_L14,
    CLIP_L14_336,
    DEEPSEEK_V2_SMALL,
    DEEPSEEK_V3_SMALL,
    LLAVA_SMALL,
    WHISPER_SMALL,
    WHISPER_TINY,
    WHISPER_TURBO_SMALL,
)

# --- tiny models for the fast subset ---------------------------------------------
TINY_GPT2: dict[str, Any] = {
    "model_type": "gpt2",
    "n_layer": 2,
    "n_embd": 128,
    "n_head": 4,
    "vocab_size": 1000,
    "n_positions": 512,
}
TINY_LLAMA_GQA: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 344,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 1024,
}
TINY_BERT: dict[str, Any] = {
    "model_type": "bert",
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 512,
    "vocab_size": 1000,
}
TINY_MIXTRAL: dict[str, Any] = {
    "model_type": "mixtral",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 1000,
}
TINY_T5: dict[str, Any] = {
    "model_type": "t5",
    "d_model": 128,
    "d_kv": 32,
    "d_ff": 512,
    "num_layers": 2,
    "num_heads": 4,
    "vocab_size": 1000,
}

# --- real shapes --------------------------------------------------------------------
GPT2_124M: dict[str, Any] = {
    "model_type": "gpt2",
    "n_layer": 12,
    "n_embd": 768,
    "n_head": 12,
    "vocab_size": 50257,
    "n_positions": 1024,
}
OPT_125M: dict[str, Any] = {
    "model_type": "opt",
    "hidden_size": 768,
    "ffn_dim": 3072,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "vocab_size": 50272,
    "max_position_embeddings": 2048,
    "word_embed_proj_dim": 768,
    "do_layer_norm_before": True,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_function": "relu",
}
OPT_350M: dict[str, Any] = {
    "model_type": "opt",
    "hidden_size": 1024,
    "ffn_dim": 4096,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "vocab_size": 50272,
    "max_position_embeddings": 2048,
    "word_embed_proj_dim": 512,
    "do_layer_norm_before": False,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_function": "relu",
}
# Llama-3.2-1B: Llama-3 architecture (GQA 32/8 heads, 128k vocab, tied embeddings) at 1.2B.
LLAMA3_1B: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "head_dim": 64,
}
LLAMA3_1B_LONG: dict[str, Any] = {**LLAMA3_1B, "max_position_embeddings": 131072}
LLAMA2_7B: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
MIXTRAL_SMALL: dict[str, Any] = {
    "model_type": "mixtral",
    "hidden_size": 512,
    "intermediate_size": 1792,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}
BERT_BASE: dict[str, Any] = {
    "model_type": "bert",
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "vocab_size": 30522,
    "max_position_embeddings": 512,
}
# Sentence-embedding encoders: the bare BertModel (no MLM head), trained with an in-batch contrastive loss.
MINILM_L6: dict[str, Any] = {
    "model_type": "bert",
    "architectures": ["BertModel"],
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "vocab_size": 30522,
    "max_position_embeddings": 512,
}
BGE_BASE: dict[str, Any] = {**BERT_BASE, "architectures": ["BertModel"]}
# Vision Transformer: 224 x 224 images in 16 x 16 patches, 196 patches + CLS = 197 tokens.
VIT_BASE: dict[str, Any] = {
    "model_type": "vit",
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "image_size": 224,
    "patch_size": 16,
    "num_labels": 1000,
}
VIT_LARGE: dict[str, Any] = {
    **VIT_BASE,
    "hidden_size": 1024,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
}
T5_SMALL: dict[str, Any] = {
    "model_type": "t5",
    "d_model": 512,
    "d_kv": 64,
    "d_ff": 2048,
    "num_layers": 6,
    "num_heads": 8,
    "vocab_size": 32128,
}
T5_BASE: dict[str, Any] = {
    "model_type": "t5",
    "d_model": 768,
    "d_kv": 64,
    "d_ff": 3072,
    "num_layers": 12,
    "num_heads": 12,
    "vocab_size": 32128,
}


def _c(label: str, model: dict[str, Any], b: int, s: int, precision: str = "bf16-mixed", **kw: Any) -> TraceConfig:
    return TraceConfig(label=label, model=model, micro_batch=b, seq_len=s, precision=precision, **kw)


# T5 is traced with eager attention only: its learned relative-position bias is a float
# mask that needs a gradient, and CPU SDPA then takes the math path (s x s stored), so an
# "sdpa" T5 trace would not stand for a fused kernel.
CONFIGS: list[TraceConfig] = [
    # fast subset
    _c("tiny-gpt2-fp32-adamw", TINY_GPT2, 2, 128, "fp32", fast=True),
    _c("tiny-llama-gqa-bf16mixed", TINY_LLAMA_GQA, 2, 256, fast=True),
    _c("tiny-llama-gqa-fsdp4-bf16mixed", TINY_LLAMA_GQA, 2, 256, world_size=4, fast=True),
    _c("tiny-llama-gqa-bf16mixed-selective", TINY_LLAMA_GQA, 2, 256, activation_checkpointing="selective", fast=True),
    _c("tiny-bert-fp32-eager", TINY_BERT, 4, 128, "fp32", attention="eager", fast=True),
    _c("tiny-mixtral-bf16", TINY_MIXTRAL, 2, 128, "bf16", fast=True),
    _c("tiny-t5-fp32-eager-sgd", TINY_T5, 2, 128, "fp32", attention="eager", optimizer="sgd", fast=True),
    # GPT-2 124M
    _c("gpt2-b1-s1024-fp32", GPT2_124M, 1, 1024, "fp32"),
    _c("gpt2-b4-s1024-bf16mixed", GPT2_124M, 4, 1024),
    _c("gpt2-b4-s1024-bf16mixed-eager", GPT2_124M, 4, 1024, attention="eager"),
    _c("gpt2-b4-s1024-fp16mixed", GPT2_124M, 4, 1024, "fp16-mixed"),
    _c("gpt2-b8-s512-bf16mixed-ac", GPT2_124M, 8, 512, activation_checkpointing="full"),
    _c("gpt2-b2-s1024-bf16-sgd", GPT2_124M, 2, 1024, "bf16", optimizer="sgd"),
    _c("gpt2-fsdp64-b2-s1024-bf16mixed", GPT2_124M, 2, 1024, world_size=64),
    _c(
        "gpt2-b4-s1024-bf16mixed-eager-selective",
        GPT2_124M,
        4,
        1024,
        attention="eager",
        activation_checkpointing="selective",
    ),
    # OPT
    _c("opt125m-b8-s512-bf16mixed", OPT_125M, 8, 512),
    _c("opt125m-b4-s2048-fp32-eager", OPT_125M, 4, 2048, "fp32", attention="eager"),
    _c("opt350m-b4-s1024-bf16mixed", OPT_350M, 4, 1024),
    _c("opt350m-b4-s1024-bf16mixed-ac", OPT_350M, 4, 1024, activation_checkpointing="full"),
    _c("opt350m-fsdp8-b4-s2048-bf16mixed", OPT_350M, 4, 2048, world_size=8),
    _c(
        "opt350m-fsdp8-b4-s2048-bf16mixed-eager-selective",
        OPT_350M,
        4,
        2048,
        world_size=8,
        attention="eager",
        activation_checkpointing="selective",
    ),
    # Llama-3-style GQA (Llama-3.2-1B shapes)
    _c("llama3-1b-b1-s2048-bf16mixed", LLAMA3_1B, 1, 2048),
    _c("llama3-1b-b1-s2048-bf16mixed-eager", LLAMA3_1B, 1, 2048, attention="eager"),
    _c("llama3-1b-b2-s4096-bf16mixed-ac", LLAMA3_1B, 2, 4096, activation_checkpointing="full"),
    _c("llama3-1b-b4-s1024-bf16-adamw", LLAMA3_1B, 4, 1024, "bf16"),
    _c("llama3-1b-b1-s1024-fp32-sgd", LLAMA3_1B, 1, 1024, "fp32", optimizer="sgd"),
    _c("llama3-1b-b2-s2048-bf16mixed-selective", LLAMA3_1B, 2, 2048, activation_checkpointing="selective"),
    _c(
        "llama3-1b-b1-s4096-bf16-eager-selective",
        LLAMA3_1B,
        1,
        4096,
        "bf16",
        attention="eager",
        activation_checkpointing="selective",
    ),
    _c("llama3-1b-fsdp2-b2-s2048-bf16mixed", LLAMA3_1B, 2, 2048, world_size=2),
    _c("llama3-1b-fsdp8-b2-s4096-bf16mixed-ac", LLAMA3_1B, 2, 4096, world_size=8, activation_checkpointing="full"),
    # Op-level checkpointing (our backends' policy, torchtitan's "op"), whole steps at real sizes.
    _c("llama3-1b-b2-s4096-bf16mixed-op", LLAMA3_1B, 2, 4096, activation_checkpointing="op"),
    _c("llama2-7b-fsdp8-b2-s4096-bf16mixed-op", LLAMA2_7B, 2, 4096, world_size=8, activation_checkpointing="op"),
    # Llama-2-7B (real size)
    _c(
        "llama2-7b-b1-s1024-bf16mixed",
        LLAMA2_7B,
        1,
        1024,
        notes="AMP on one rank: peak is the foreach AdamW step (params+grads+2 states+1 temp, all fp32)",
    ),
    _c("llama2-7b-b1-s2048-bf16-ac-sgd", LLAMA2_7B, 1, 2048, "bf16", activation_checkpointing="full", optimizer="sgd"),
    _c("llama2-7b-fsdp8-b1-s4096-bf16mixed-ac", LLAMA2_7B, 1, 4096, world_size=8, activation_checkpointing="full"),
    _c(
        "llama2-7b-fsdp64-b2-s4096-bf16mixed",
        LLAMA2_7B,
        2,
        4096,
        world_size=64,
        notes="no activation checkpointing: activations dominate once states are sharded 64 ways",
    ),
    # Mixtral-style MoE, small dims
    _c("mixtral-small-b4-s1024-bf16mixed", MIXTRAL_SMALL, 4, 1024),
    _c("mixtral-small-b4-s1024-fp32-eager", MIXTRAL_SMALL, 4, 1024, "fp32", attention="eager"),
    _c("mixtral-small-fsdp2-b4-s2048-bf16mixed", MIXTRAL_SMALL, 4, 2048, world_size=2),
    _c("mixtral-small-b4-s2048-bf16-selective", MIXTRAL_SMALL, 4, 2048, "bf16", activation_checkpointing="selective"),
    # Sentence-embedding encoders (text_embedding): no head, contrastive loss
    _c("minilm-l6-embed-b64-s256-bf16mixed", MINILM_L6, 64, 256),
    _c("bge-base-embed-b32-s512-bf16mixed", BGE_BASE, 32, 512),
    _c("bge-base-embed-b32-s512-fp32-ac", BGE_BASE, 32, 512, "fp32", activation_checkpointing="full"),
    # Vision Transformer (image classification), 197 tokens
    _c("vit-base-b64-s197-bf16mixed", VIT_BASE, 64, 197),
    _c("vit-base-b32-s197-fp32-eager", VIT_BASE, 32, 197, "fp32", attention="eager"),
    _c("vit-large-b32-s197-bf16mixed-ac", VIT_LARGE, 32, 197, activation_checkpointing="full"),
    # BERT-base (MLM loss)
    _c("bert-base-b8-s512-fp32", BERT_BASE, 8, 512, "fp32"),
    _c("bert-base-b8-s512-bf16mixed-eager", BERT_BASE, 8, 512, attention="eager"),
    _c("bert-base-fsdp4-b4-s128-fp32", BERT_BASE, 4, 128, "fp32", world_size=4),
    _c(
        "bert-base-b8-s512-fp32-eager-selective",
        BERT_BASE,
        8,
        512,
        "fp32",
        attention="eager",
        activation_checkpointing="selective",
    ),
    # T5 (seq2seq loss, decoder length = seq_len)
    _c("t5-small-b8-s512-bf16mixed-eager", T5_SMALL, 8, 512, attention="eager"),
    _c("t5-base-b4-s512-fp32-eager-adafactor", T5_BASE, 4, 512, "fp32", attention="eager", optimizer="adafactor"),
    _c("t5-base-b4-s512-bf16mixed-eager-ac", T5_BASE, 4, 512, attention="eager", activation_checkpointing="full"),
    # Whisper (transcription loss; encoder over 1500 audio positions, decoder over seq_len tokens)
    _c("whisper-tiny-b8-s448-bf16mixed-eager", WHISPER_TINY, 8, 448, attention="eager"),
    _c("whisper-tiny-b4-s128-fp32", WHISPER_TINY, 4, 128, "fp32"),
    _c("whisper-small-b8-s448-bf16mixed", WHISPER_SMALL, 8, 448),
    _c("whisper-small-b4-s448-fp32-eager", WHISPER_SMALL, 4, 448, "fp32", attention="eager"),
    _c("whisper-small-b16-s448-bf16mixed-ac", WHISPER_SMALL, 16, 448, activation_checkpointing="full"),
    _c("whisper-small-fsdp4-b8-s448-bf16mixed", WHISPER_SMALL, 8, 448, world_size=4),
    _c("whisper-turbo-small-b8-s256-bf16mixed-eager", WHISPER_TURBO_SMALL, 8, 256, attention="eager"),
    # LLaVA-style (one 336-pixel image of 576 tokens and its text per sequence). Not under FSDP: there
    # FSDPMemTracker files 11.8 GiB as optimizer state at the step while the states themselves hold 1.6 GiB
    # (checked by summing them), a tracker attribution we have not explained; its backward peak (9.27 GiB)
    # is within 3% of the estimate.
    _c("llava-small-b4-s1024-bf16mixed", LLAVA_SMALL, 4, 1024),
    _c("llava-small-b2-s1024-fp32-eager", LLAVA_SMALL, 2, 1024, "fp32", attention="eager"),
    _c("llava-small-b8-s2048-bf16mixed-ac", LLAVA_SMALL, 8, 2048, activation_checkpointing="full"),
    # DeepSeek-style: latent attention and shared + routed experts
    _c("deepseek-v2-small-b4-s2048-bf16mixed", DEEPSEEK_V2_SMALL, 4, 2048),
    _c("deepseek-v2-small-b2-s2048-fp32-eager", DEEPSEEK_V2_SMALL, 2, 2048, "fp32", attention="eager"),
    _c("deepseek-v3-small-b4-s2048-bf16mixed", DEEPSEEK_V3_SMALL, 4, 2048),
    _c("deepseek-v3-small-b8-s2048-bf16mixed-ac", DEEPSEEK_V3_SMALL, 8, 2048, activation_checkpointing="full"),
    _c("deepseek-v3-small-fsdp4-b4-s2048-bf16mixed", DEEPSEEK_V3_SMALL, 4, 2048, world_size=4),
    # CLIP (contrastive image-text pairs; the text's 77 tokens, the image's patches and class token)
    _c("clip-b16-b128-s77-bf16mixed", CLIP_B16, 128, 77),
    _c("clip-b16-b64-s77-fp32-eager", CLIP_B16, 64, 77, "fp32", attention="eager"),
    _c("clip-l14-b64-s77-bf16mixed-ac", CLIP_L14, 64, 77, activation_checkpointing="full"),
    # Not under FSDP2: fully_shard refuses CLIP's scalar logit_scale parameter.
    _c("clip-l14-b64-s77-bf16mixed", CLIP_L14, 64, 77),
    # Context parallelism: FSDP2 over every rank, the engine's all-gather attention, rank 0's zig-zag share
    # (benchmarks/memory/trace_sharding.py)
    _c("llama3-1b-cp2-b1-s16384-bf16mixed", LLAMA3_1B_LONG, 1, 16384, world_size=2, context_parallel=2),
    _c("llama3-1b-cp4-b1-s32768-bf16mixed", LLAMA3_1B_LONG, 1, 32768, world_size=4, context_parallel=4),
    _c(
        "llama3-1b-cp2xdp2-b1-s16384-bf16mixed-ac",
        LLAMA3_1B_LONG,
        1,
        16384,
        world_size=4,
        context_parallel=2,
        activation_checkpointing="full",
    ),  # fmt: skip
]


def by_label() -> dict[str, TraceConfig]:
    labels = [c.label for c in CONFIGS]
    if len(set(labels)) != len(labels):
        raise ValueError("duplicate trace labels")
    return {c.label: c for c in CONFIGS}
