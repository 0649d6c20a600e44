"""The mixture-of-experts families benchmarks/memory/memory_per_layer.py traces (benchmarks/memory/per_layer_models.py holds the
rest): each catalog config with tiny dimensions, a few experts and the family's own routing."""

from __future__ import annotations

from typing import Any

H, HEADS, FFN, VOCAB = 256, 4, 1024, 512
TOKENS = {"bos_token_id": 1, "eos_token_id": 2}

MOE_OVERRIDES: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen3-30b-a3b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            moe_intermediate_size=128,
            num_attention_heads=HEADS,
            num_key_value_heads=2,
            head_dim=64,
            num_experts=8,
            num_experts_per_tok=2,
            vocab_size=VOCAB,
            **TOKENS,
        ),
    ),
    **{
        name: (
            "num_hidden_layers",
            dict(
                hidden_size=H,
                intermediate_size=FFN,
                num_attention_heads=HEADS,
                num_key_value_heads=HEADS,
                kv_lora_rank=64,
                q_lora_rank=q_lora,
                qk_nope_head_dim=32,
                qk_rope_head_dim=16,
                v_head_dim=32,
                moe_intermediate_size=128,
                n_routed_experts=8,
                n_shared_experts=1,
                num_experts_per_tok=2,
                first_k_dense_replace=0,
                n_group=1,
                topk_group=1,
                vocab_size=VOCAB,
                **TOKENS,
            ),
        )
        for name, q_lora in (("deepseek-v2-lite", None), ("deepseek-v3", 96))
    },
    "qwen1.5-moe-a2.7b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            moe_intermediate_size=128,
            shared_expert_intermediate_size=FFN,
            num_experts=4,
            num_experts_per_tok=2,
            num_attention_heads=HEADS,
            num_key_value_heads=HEADS,
            vocab_size=VOCAB,
            **TOKENS,
        ),
    ),
    # gpt-oss: biased experts and router, attention sinks, alternating sliding / full attention (eager only).
    "gpt-oss-20b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=128,
            num_attention_heads=HEADS,
            num_key_value_heads=2,
            head_dim=64,
            num_local_experts=8,
            num_experts_per_tok=2,
            experts_per_token=2,
            vocab_size=VOCAB,
            pad_token_id=0,
            **TOKENS,
        ),
    ),
    # Llama 4: Scout routes every block (top-1 + an ungated shared expert) with L2-normed q/k; Maverick interleaves
    # dense blocks (an MLP twice the experts' width) with routed ones. transformers' Llama4TextMoe runs every
    # expert on every token (scaled by its sigmoid score, zero off the top-k), so only with one expert does it do a
    # routed implementation's work: traced with one.
    **{
        name: (
            "num_hidden_layers",
            dict(
                hidden_size=H,
                intermediate_size=128,
                intermediate_size_mlp=256,
                num_attention_heads=HEADS,
                num_key_value_heads=2,
                head_dim=64,
                num_local_experts=1,
                vocab_size=VOCAB,
                pad_token_id=0,
                **TOKENS,
            ),
        )
        for name in ("llama-4-scout", "llama-4-maverick")
    },
}
