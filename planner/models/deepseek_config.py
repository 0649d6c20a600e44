"""Config reader for DeepSeek-V2/V3: multi-head latent attention and fine-grained MoE with shared experts.

Reads the fields of transformers' DeepseekV2Config / DeepseekV3Config under their names and defaults:
the latent attention's ranks and head widths, the routed experts (n_routed_experts of
moe_intermediate_size, top num_experts_per_tok), n_shared_experts always-on experts (one gated MLP of
n_shared_experts x moe_intermediate_size), and the first_k_dense_replace leading blocks that keep a
dense MLP of intermediate_size (docs/models-and-hardware.md).
"""

from __future__ import annotations

from planner.models.config_fields import ConfigFields
from planner.models.param_details import ParameterDetails
from planner.models.parsed_config import ParsedConfig
from planner.models.spec import MlpKind, ModelArchitecture


def read_deepseek(f: ConfigFields, model_type: str) -> ParsedConfig:
    hidden, heads, layers = f.int("hidden_size"), f.int("num_attention_heads"), f.int("num_hidden_layers")
    nope, rope = f.int("qk_nope_head_dim", default=128), f.int("qk_rope_head_dim", default=64)
    experts = f.int("n_routed_experts", "num_local_experts", default=256 if model_type == "deepseek_v3" else 64)
    top_k = f.int("num_experts_per_tok", default=8 if model_type == "deepseek_v3" else 6)
    if top_k > experts:
        raise f.error("num_experts_per_tok", f"({top_k}) exceeds the number of experts ({experts})")
    moe_ffn = f.int("moe_intermediate_size", default=2048 if model_type == "deepseek_v3" else 1407)
    dense = min(f.int("first_k_dense_replace", default=3 if model_type == "deepseek_v3" else 0, minimum=0), layers)
    if f.int("moe_layer_freq", default=1) != 1:
        raise f.error("moe_layer_freq", "other than 1 is not planned (every block after the dense ones is MoE)")
    shared = f.int("n_shared_experts", default=1 if model_type == "deepseek_v3" else 2, minimum=0) * moe_ffn
    # Both configs default to a 1536-wide query bottleneck; a null (DeepSeek-V2-Lite's) means one projection.
    null_query_rank = "q_lora_rank" in f.config and f.config["q_lora_rank"] is None
    q_lora_rank = 0 if null_query_rank else f.int("q_lora_rank", default=1536, minimum=0)
    return ParsedConfig(
        dims=ModelArchitecture(
            model_type=model_type,
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=heads,  # every head has its own key and value, expanded from the latent
            head_dim=nope + rope,
            ffn_size=f.int("intermediate_size"),
            mlp_kind=MlpKind.GATED,
            activation=f.str("hidden_act", default="silu"),
            vocab_size=f.int("vocab_size"),
            max_position_embeddings=f.int(
                "max_position_embeddings", default=163840 if model_type == "deepseek_v3" else 2048
            ),
            tied_embeddings=f.bool("tie_word_embeddings", False),
            norm="rmsnorm",
            position_embedding="rotary",
            num_experts=experts,
            experts_per_token=top_k,
            expert_ffn_size=moe_ffn,
            shared_expert_ffn_size=shared,
            dense_layers=dense,
            q_lora_rank=q_lora_rank,
            kv_lora_rank=f.int("kv_lora_rank", default=512),
            qk_rope_head_dim=rope,
            v_head_dim=f.int("v_head_dim", default=128),
            transformers_class="DeepseekV3ForCausalLM" if model_type == "deepseek_v3" else "DeepseekV2ForCausalLM",
            attention_dropout=f.probability("attention_dropout"),
        ),
        details=ParameterDetails(shared_expert_ffn_size=shared, shared_expert_gate=False, dense_layers=dense),
    )
