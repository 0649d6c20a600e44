"""The weight matrices of one transformer block, as (fan_in, fan_out, how many) shapes.

What the memory estimate casts (autocast, FP8), shards (expert parallelism) and adapts (LoRA:
planner/memory/lora_targets.py) are these matrices; latent attention's five follow param_formula.py's count.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.models.spec import MlpKind, ModelSpec


@dataclass(frozen=True)
class LinearShape:
    fan_in: int
    fan_out: int
    count: int = 1  # how many such matrices per block (experts, gate+up)

    @property
    def params(self) -> int:
        return self.fan_in * self.fan_out * self.count


def attention_shapes(spec: ModelSpec) -> list[LinearShape]:
    """One attention's weight matrices: q, k and v, and the output; latent attention (DeepSeek's MLA) as
    param_formula.py counts it: q through its q_lora_rank bottleneck (or one projection), the kv_lora_rank latent and
    the shared rotary key, their expansion to every head's key and value, the output."""
    h, heads, q_width = spec.hidden_size, spec.num_heads, spec.num_heads * spec.head_dim
    if not spec.is_mla:
        return [LinearShape(h, q_width), LinearShape(h, spec.kv_size, 2), LinearShape(q_width, h)]
    bottleneck = spec.q_lora_rank
    query = [LinearShape(h, bottleneck), LinearShape(bottleneck, q_width)] if bottleneck else [LinearShape(h, q_width)]
    nope = spec.head_dim - spec.qk_rope_head_dim
    latent = LinearShape(h, spec.kv_lora_rank + spec.qk_rope_head_dim)
    expand = LinearShape(spec.kv_lora_rank, heads * (nope + spec.v_head_dim))
    return [*query, latent, expand, LinearShape(heads * spec.v_head_dim, h)]


def block_linear_shapes(spec: ModelSpec, cross_attention: bool = False) -> list[LinearShape]:
    """The weight matrices of one transformer block: attention_shapes (twice with cross-attention), then a shared
    expert's two if any, then the MLP's or experts' two."""
    h = spec.hidden_size
    attention = attention_shapes(spec) * (2 if cross_attention else 1)
    experts = max(spec.num_experts, 1)
    ffn = spec.expert_ffn_size if spec.is_moe and spec.expert_ffn_size else spec.ffn_size
    up_matrices = 2 if spec.mlp_kind is MlpKind.GATED else 1
    mlp = [LinearShape(h, ffn, up_matrices * experts), LinearShape(ffn, h, experts)]
    if spec.shared_expert_ffn_size:  # the always-on shared expert (Qwen2-MoE, DeepSeek): a gated MLP
        shared = spec.shared_expert_ffn_size
        mlp = [LinearShape(h, shared, 2), LinearShape(shared, h)] + mlp
    return attention + mlp
