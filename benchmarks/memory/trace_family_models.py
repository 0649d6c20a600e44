"""Model configs of the later families' traces (benchmarks/memory/trace_configs.py): Whisper, LLaVA, CLIP and
DeepSeek, as inline HF config dicts with each family's published shapes (small where a full-size trace
would say nothing more)."""

from __future__ import annotations

from typing import Any

# Whisper (speech-to-text): the encoder always reads 30 s of audio, 3000 mel frames convolved down to 1500
# positions; seq_len is the decoder's text (448 at most).
WHISPER_TINY: dict[str, Any] = {
    "model_type": "whisper",
    "d_model": 384,
    "encoder_layers": 4,
    "decoder_layers": 4,
    "encoder_attention_heads": 6,
    "decoder_attention_heads": 6,
    "encoder_ffn_dim": 1536,
    "decoder_ffn_dim": 1536,
    "num_mel_bins": 80,
    "vocab_size": 51865,
}
WHISPER_SMALL: dict[str, Any] = {
    **WHISPER_TINY,
    "d_model": 768,
    "encoder_layers": 12,
    "decoder_layers": 12,
    "encoder_attention_heads": 12,
    "decoder_attention_heads": 12,
    "encoder_ffn_dim": 3072,
    "decoder_ffn_dim": 3072,
}
# large-v3-turbo's shape at small width: a deep encoder and a 4-layer decoder.
WHISPER_TURBO_SMALL: dict[str, Any] = {**WHISPER_SMALL, "decoder_layers": 4, "num_mel_bins": 128}
# LLaVA-1.5's tower (CLIP ViT-L/14 at 336 pixels: 576 patches + CLS) before a small Llama; the first
# 576 positions of each sequence are the image's.
CLIP_L14_336: dict[str, Any] = {
    "model_type": "clip_vision_model",
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "image_size": 336,
    "patch_size": 14,
    "projection_dim": 768,
}
LLAVA_SMALL: dict[str, Any] = {
    "model_type": "llava",
    "image_token_index": 32000,
    "pad_token_id": 32001,
    "vision_feature_layer": -2,
    "vision_feature_select_strategy": "default",
    "vision_config": CLIP_L14_336,
    "text_config": {
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "vocab_size": 32064,
        "max_position_embeddings": 4096,
    },
}
# CLIP ViT-B/16 and ViT-L/14 (image-caption pairs of 77 text tokens, contrastive loss).
CLIP_B16: dict[str, Any] = {
    "model_type": "clip",
    "architectures": ["CLIPModel"],
    "projection_dim": 512,
    "text_config": {"hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 8},
    "vision_config": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                      "num_attention_heads": 12, "image_size": 224, "patch_size": 16},
}  # fmt: skip
CLIP_L14: dict[str, Any] = {
    **CLIP_B16,
    "projection_dim": 768,
    "text_config": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12},
    "vision_config": {k: v for k, v in CLIP_L14_336.items() if k != "image_size"},
}
# DeepSeek-style MoE with multi-head latent attention, small dims: V2-Lite's shape (no q bottleneck) and
# V3's (a q_lora_rank bottleneck, sigmoid router).
DEEPSEEK_V2_SMALL: dict[str, Any] = {
    "model_type": "deepseek_v2",
    "hidden_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "q_lora_rank": None,
    "kv_lora_rank": 256,
    "qk_nope_head_dim": 64,
    "qk_rope_head_dim": 32,
    "v_head_dim": 64,
    "intermediate_size": 2816,
    "moe_intermediate_size": 512,
    "n_routed_experts": 16,
    "n_shared_experts": 2,
    "num_experts_per_tok": 4,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
    "vocab_size": 32000,
}
DEEPSEEK_V3_SMALL: dict[str, Any] = {
    **DEEPSEEK_V2_SMALL,
    "model_type": "deepseek_v3",
    "q_lora_rank": 384,
    "n_shared_experts": 1,
}
