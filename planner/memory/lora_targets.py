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

A family that fuses q, k and v (or gate and up) in one module has one adapter there. PEFT runs adapted experts by
folding the adapters into the weights each forward, a stack the experts keep for backward (rebuilt_expert_bytes).

Under QLoRA bitsandbytes stores in 4 bits the modules whose type is exactly nn.Linear, or Conv1D (transformers'
integrations/bitsandbytes.py, replace_with_bnb_linear): fused experts and routers, Falcon's FalconLinear subclass
and T5's wo (kept in fp32 by transformers) keep their width. tests/test_lora_targets.py compares every count with
PEFT's and transformers' own, and the rebuilt stacks with the tensors a PEFT forward saves.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.memory.arch_traits import arch_traits
from planner.memory.linear_shapes import LinearShape, attention_shapes
from planner.models.spec import MlpKind, ModelSpec
from planner.training_config import Precision, TrainingConfig


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
    traits = arch_traits(spec)
    attention = _attention(spec, traits.qkv_projections == 1)
    matrices = [LoraMatrix(shape) for shape in attention]
    if cross_attention:
        decoder_share = spec.num_decoder_layers / spec.num_layers
        matrices += [LoraMatrix(shape, decoder_share) for shape in attention]
    h, ffn, shared, experts = spec.hidden_size, spec.ffn_size, spec.shared_expert_ffn_size, spec.num_experts
    gated = spec.mlp_kind is MlpKind.GATED
    # One projection makes both gated inputs (Phi-3's gate_up_proj): one adapter; else gate and up, one each.
    mlp_in = LinearShape(h, 2 * ffn) if gated and traits.mlp_input_projections == 1 else LinearShape(h, ffn, 1 + gated)
    if not spec.is_moe:
        matrices += [LoraMatrix(mlp_in), LoraMatrix(LinearShape(ffn, h), quantized=not traits.mlp_output_fp32)]
        return [replace(m, quantized=False) if traits.linear_subclass else m for m in matrices]
    dense_share = min(spec.dense_layers, spec.num_layers) / spec.num_layers
    moe_share = 1 - dense_share
    if dense_share:
        dense_mlp = (mlp_in, LinearShape(ffn, h))
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


def _attention(spec: ModelSpec, fused_qkv: bool) -> list[LinearShape]:
    """The attention's matrices as modules: one query_key_value projection where the family fuses them (GPT-2,
    BLOOM, Falcon, GPT-NeoX, Phi-3), so one adapter, else q, k and v each (latent attention: its five)."""
    if not fused_qkv or spec.is_mla:
        return attention_shapes(spec)
    h, q_width = spec.hidden_size, spec.num_heads * spec.head_dim
    return [LinearShape(h, q_width + 2 * spec.kv_size), LinearShape(q_width, h)]


def adapter_params_per_block(spec: ModelSpec, rank: int, cross_attention: bool = False, ep: int = 1) -> float:
    """LoRA's trainable parameters in one average block on one rank: r x (in + out) per adapted matrix, the routed
    experts' over the ep ranks that split them."""
    return sum(
        rank * (m.shape.fan_in + m.shape.fan_out) * m.shape.count * m.share / (ep if m.routed else 1)
        for m in lora_matrices(spec, cross_attention)
        if m.adapted
    )


def routed_adapter_params_per_block(spec: ModelSpec, rank: int) -> float:
    """The routed experts' share of adapter_params_per_block, before expert parallelism splits it."""
    return sum(
        rank * (m.shape.fan_in + m.shape.fan_out) * m.shape.count * m.share for m in lora_matrices(spec) if m.routed
    )


def quantized_params_per_block(spec: ModelSpec, cross_attention: bool = False) -> float:
    """The weights QLoRA stores in 4 bits in one average block: its exact nn.Linear modules, adapted or not."""
    return sum(m.shape.params * m.share for m in lora_matrices(spec, cross_attention) if m.quantized)


def vision_adapter_params(spec: ModelSpec, rank: int) -> tuple[float, float]:
    """A LLaVA model's (adapters, 4-bit weights) outside its language model: every nn.Linear of the vision tower's
    blocks and the projector's two (vision width -> text width -> text width), which "all-linear" and bitsandbytes
    both take too."""
    tower = spec.vision_tower
    if tower is None:
        return 0.0, 0.0
    h, vision = spec.hidden_size, tower.hidden_size
    adapters = adapter_params_per_block(tower, rank) * tower.num_layers + rank * ((vision + h) + (h + h))
    return adapters, quantized_params_per_block(tower) * tower.num_layers + vision * h + h * h


def rebuilt_expert_bytes(spec: ModelSpec, config: TrainingConfig) -> float:
    """One MoE block's expert stack as PEFT runs it under LoRA, on this rank: its forward folds the adapters into
    the weights, W + BA in one baddbmm over the whole stack (peft/tuners/lora/layer.py, _LoraFactorsProxy), and the
    experts' matmuls keep that tensor for backward, the baddbmm the adapters cast to the weights' width. 0 where
    the experts take no adapter."""
    if not (config.lora_rank and spec.is_moe and arch_traits(spec).peft_adapts_experts):
        return 0.0
    expert_ffn = spec.expert_ffn_size or spec.ffn_size
    stack = spec.num_experts * (3 if spec.mlp_kind is MlpKind.GATED else 2) * spec.hidden_size * expert_ffn
    factors = sum(  # the routed experts' adapters, as many values as their parameters, in one MoE block
        config.lora_rank * (m.shape.fan_in + m.shape.fan_out) * m.shape.count for m in lora_matrices(spec) if m.routed
    )
    width = 4 if config.precision is Precision.FP32 else 2  # the frozen base's width (model_states.py)
    return (stack + factors) * width / config.expert_parallel / config.tensor_parallel


def head_linears(spec: ModelSpec) -> list[LinearShape]:
    """Linears beside the blocks that are not the output head, which "all-linear" adapts and bitsandbytes quantises
    (its skip list names the model's last parameter, a bias here): BERT's and RoBERTa's pooler (or their MLM head's
    transform), hidden x hidden; ViT's classifier over its labels (vocab_size)."""
    h = spec.hidden_size
    if spec.model_type in ("bert", "roberta"):
        return [LinearShape(h, h)]
    if spec.model_type == "vit":
        return [LinearShape(h, spec.vocab_size)]
    return []


def head_adapter_params(spec: ModelSpec, rank: int) -> float:
    return sum(rank * (shape.fan_in + shape.fan_out) for shape in head_linears(spec))
