"""The mixture-of-experts fields of the Llama-style configs (planner/models/hf_config.py reads the rest).

Each family names its routed experts, their width and its dense blocks differently; this reads them under
transformers' own names and defaults (docs/models-and-hardware.md):
- Mixtral: num_local_experts of intermediate_size, top num_experts_per_tok, every block MoE;
- Qwen2-MoE / Qwen3-MoE: num_experts of moe_intermediate_size; Qwen2-MoE adds a gated shared expert;
  blocks listed in mlp_only_layers or off the decoder_sparse_step keep a dense MLP of intermediate_size;
- gpt-oss: num_local_experts of intermediate_size with biased experts and router, every block MoE;
- Llama 4 (text): num_local_experts of intermediate_size plus an ungated shared expert of the same width;
  blocks off interleave_moe_layer_step (or not in moe_layers) keep a dense MLP of intermediate_size_mlp.

    read_moe(fields, model_type, layers) -> (ModelArchitecture fields, ParameterDetails fields, ffn_size)
"""

from __future__ import annotations

from planner.models.config_fields import ConfigFields


def _sparse_count(f: ConfigFields, model_type: str, layers: int) -> int:
    """How many blocks route to experts; the others keep the dense MLP."""
    if model_type in ("qwen2_moe", "qwen3_moe"):
        step, dense_only = f.int("decoder_sparse_step", default=1), set(f.int_list("mlp_only_layers"))
        return sum(1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0)
    if model_type == "llama4_text":
        listed = f.config.get("moe_layers")
        if listed is not None:
            return len({i for i in f.int_list("moe_layers") if 0 <= i < layers})
        step = f.int("interleave_moe_layer_step", default=1)
        return len(range(step - 1, layers, step))  # transformers' Llama4TextConfig: every step-th block
    return layers


def read_moe(f: ConfigFields, model_type: str, layers: int) -> tuple[dict, dict, int]:
    """ModelArchitecture and ParameterDetails fields of an MoE config (empty for dense ones), and the width of
    its dense MLP (ffn_size)."""
    ffn = f.int("intermediate_size")
    if model_type in ("mixtral", "gpt_oss"):
        gpt_oss = model_type == "gpt_oss"
        dims = dict(
            num_experts=f.int("num_local_experts", "num_experts", default=128 if gpt_oss else 8),
            experts_per_token=f.int("num_experts_per_tok", "experts_per_token", default=4 if gpt_oss else 2),
            expert_ffn_size=ffn,
        )
        details: dict = dict(expert_bias=True, router_bias=True, attention_sinks=True) if gpt_oss else {}
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        qwen3 = model_type == "qwen3_moe"
        dims = dict(
            num_experts=f.int("num_experts", default=128 if qwen3 else 60),
            experts_per_token=f.int("num_experts_per_tok", default=8 if qwen3 else 4),
            expert_ffn_size=f.int("moe_intermediate_size", default=768 if qwen3 else 1408),
        )
        shared = 0 if qwen3 else f.int("shared_expert_intermediate_size", default=5632, minimum=0)
        dims["shared_expert_ffn_size"] = shared  # the spec says it too (memory, linear shapes)
        details = dict(shared_expert_ffn_size=shared)
    elif model_type == "llama4_text":
        dims = dict(
            num_experts=f.int("num_local_experts", default=16),
            experts_per_token=f.int("num_experts_per_tok", default=1),
            expert_ffn_size=ffn,
            shared_expert_ffn_size=ffn,
        )
        details = dict(shared_expert_ffn_size=ffn, shared_expert_gate=False)
        ffn = f.int("intermediate_size_mlp", default=16384)
    else:
        return {}, {}, ffn
    if dims["experts_per_token"] > dims["num_experts"]:
        raise f.error(
            "num_experts_per_tok",
            f"({dims['experts_per_token']}) exceeds the number of experts ({dims['num_experts']})",
        )
    dense = layers - _sparse_count(f, model_type, layers)
    if dense:
        dims["dense_layers"] = details["dense_layers"] = dense
    return dims, details, ffn
