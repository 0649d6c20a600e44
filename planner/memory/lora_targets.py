"""The weight matrices LoRA adapts, as PEFT's LoraConfig(target_modules="all-linear") does on transformers 5.

A plan with --lora-rank is trained with PEFT in the user's own code (docs/running.md, "Weights"), so its adapters
are PEFT's, each r x (in + out) trainable parameters:

- "all-linear" takes every torch.nn.Linear of the model but its output head (peft/tuners/tuners_utils.py,
  _maybe_include_all_linear_layers): the attention, the MLP, a shared expert (and Qwen2-MoE's gate on it), an MoE
  model's dense blocks' MLP, and a router that is an nn.Linear (Llama 4's);
- transformers 5 keeps an MoE block's routed experts as fused 3-D parameters, which that rule does not find. For
  the families whose experts were nn.Linear modules in transformers 4 (Mixtral, and those transformers converts as
  Qwen2-MoE: Qwen3-MoE, DeepSeek-V2/V3), PEFT adds them back as target_parameters, with the router's weight
  (peft/utils/transformers_weight_conversion.py, _MOE_TARGET_MODULE_MAPPING); the fused gate and up projections
  take twice the rank, so the pair keeps its two adapters' size. The same mapping takes the names gate_proj,
  up_proj and down_proj off the modules it adapts, so DeepSeek's shared expert and dense blocks' MLP, nn.Linear
  modules of those names, go without adapters (checked against PEFT 0.21). Llama 4, gpt-oss and Qwen2-MoE itself
  keep their experts unadapted (Traits.peft_adapts_experts).

Under QLoRA bitsandbytes stores in 4 bits the modules whose type is exactly nn.Linear (transformers'
integrations/bitsandbytes.py, replace_with_bnb_linear): fused experts and a router, linear or not, keep 16 bits.
tests/test_lora_targets.py compares every count with PEFT's and transformers' own.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.memory.arch_traits import arch_traits
from planner.memory.linear_shapes import LinearShape, attention_shapes, block_linear_shapes
from planner.models.spec import MlpKind, ModelSpec


@dataclass(frozen=True)
class LoraMatrix:
    """A block matrix as LoRA and QLoRA see it, in the share of the blocks that hold it (dense or MoE blocks)."""

    shape: LinearShape
    share: float = 1.0
    adapted: bool = True  # LoRA trains an adapter on it
    quantized: bool = True  # QLoRA stores it in 4 bits (an exact nn.Linear)
    routed: bool = False  # a routed expert's: split over expert parallelism, run by top-k of a token's experts


def lora_matrices(spec: ModelSpec, cross_attention: bool = False) -> list[LoraMatrix]:
    """The matrices of one average block that LoRA adapts or QLoRA quantises (the module docstring says which).

    cross_attention: an encoder-decoder's decoder blocks attend twice, in the decoder's share of the blocks."""
    matrices = [LoraMatrix(shape) for shape in attention_shapes(spec)]
    if cross_attention:
        decoder_share = spec.num_decoder_layers / spec.num_layers
        matrices += [LoraMatrix(shape, decoder_share) for shape in attention_shapes(spec)]
    if not spec.is_moe:
        return matrices + [LoraMatrix(shape) for shape in block_linear_shapes(spec)[-2:]]
    h, ffn, shared, experts = spec.hidden_size, spec.ffn_size, spec.shared_expert_ffn_size, spec.num_experts
    gated = spec.mlp_kind is MlpKind.GATED
    dense_share = min(spec.dense_layers, spec.num_layers) / spec.num_layers
    moe_share = 1 - dense_share
    traits = arch_traits(spec)
    if dense_share:
        dense_mlp = (LinearShape(h, ffn, 2 if gated else 1), LinearShape(ffn, h))
        matrices += [LoraMatrix(shape, dense_share, adapted=not traits.peft_adapts_experts) for shape in dense_mlp]
    experts_adapted = traits.peft_adapts_experts  # and so the MLP names taken off the modules
    if traits.linear_router or experts_adapted:
        matrices.append(LoraMatrix(LinearShape(h, experts), moe_share, quantized=False))
    if shared:  # the always-on shared expert (a gated MLP), in the MoE blocks only
        shared_mlp = [LinearShape(h, shared, 2), LinearShape(shared, h)]
        matrices += [LoraMatrix(shape, moe_share, adapted=not experts_adapted) for shape in shared_mlp]
        matrices += [LoraMatrix(LinearShape(h, 1), moe_share)] if traits.shared_expert_gate else []
    if experts_adapted:
        expert_ffn = spec.expert_ffn_size or ffn
        # gate_up at twice the rank: as two adapters of r x (h + 2f) each, for every expert
        up = LinearShape(h, 2 * expert_ffn, 2 * experts) if gated else LinearShape(h, expert_ffn, experts)
        for shape in (up, LinearShape(expert_ffn, h, experts)):
            matrices.append(LoraMatrix(shape, moe_share, quantized=False, routed=True))
    return matrices


def adapter_params_per_block(spec: ModelSpec, rank: int, cross_attention: bool = False, ep: int = 1) -> float:
    """LoRA's trainable parameters in one average block on one rank: r x (in + out) per adapted matrix, the routed
    experts' over the ep ranks that split them."""
    return sum(
        rank * (m.shape.fan_in + m.shape.fan_out) * m.shape.count * m.share / (ep if m.routed else 1)
        for m in lora_matrices(spec, cross_attention)
        if m.adapted
    )


def quantized_params_per_block(spec: ModelSpec, cross_attention: bool = False) -> float:
    """The weights QLoRA stores in 4 bits in one average block: the adapted exact nn.Linear modules."""
    return sum(m.shape.params * m.share for m in lora_matrices(spec, cross_attention) if m.quantized)


def vision_adapter_params(spec: ModelSpec, rank: int) -> float:
    """A LLaVA model's adapters outside its language model: every nn.Linear of the vision tower's blocks and the
    projector's two (vision width -> text width -> text width), all of which "all-linear" takes too."""
    tower = spec.vision_tower
    if tower is None:
        return 0.0
    h, vision = spec.hidden_size, tower.hidden_size
    return adapter_params_per_block(tower, rank) * tower.num_layers + rank * ((vision + h) + (h + h))
