"""The matrices LoRA adapts, counted against transformers' own modules.

Reference: PEFT's target_modules="all-linear" adapts every torch.nn.Linear of the model but its output head, with
r x (in + out) trainable parameters each (LoRA's A and B). The planner's adapter count
(planner/memory/rank_params.py adapted_linears) must equal that sum over each family's decoder blocks as
transformers builds them: an MoE block's routed experts are fused 3-D tensors and take no adapter, while the
attention, a shared expert and the dense blocks' MLP do. Mixture-of-experts models planned with every routed expert
adapted had Qwen3-30B-A3B's LoRA at 63 times its adapters, and a one-GPU plan that fits said it did not. Under
QLoRA, bitsandbytes stores in 4 bits the modules whose type is exactly nn.Linear (transformers'
integrations/bitsandbytes.py, replace_with_bnb_linear): the fused experts keep their 16 bits.
"""

from __future__ import annotations

import pytest

from planner.memory.rank_params import rank_params
from planner.models.flops import lora_params_per_token, model_shape
from planner.models.hf_config import spec_from_hf_config
from planner.training_config import TrainingConfig

RANK = 8
SIZES = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
# fmt: off
FAMILIES = {
    "llama": dict(intermediate_size=512),
    "mixtral": dict(intermediate_size=512, num_local_experts=8, num_experts_per_tok=2),
    # no head_dim: transformers 5's Qwen3-MoE attention takes hidden / heads (Qwen3's dense config says 128)
    "qwen3_moe": dict(intermediate_size=512, moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2),
    # latent attention, a shared expert, and one dense block first
    "deepseek_v3": dict(intermediate_size=512, moe_intermediate_size=128, kv_lora_rank=64, q_lora_rank=96,
                        qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, n_routed_experts=8,
                        n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1),
    # a shared expert with a linear sigmoid gate of its own
    "qwen2_moe": dict(intermediate_size=512, moe_intermediate_size=128, shared_expert_intermediate_size=256,
                      num_experts=8, num_experts_per_tok=2),
    # a linear router, a shared expert, and dense blocks interleaved (Maverick's pattern)
    "llama4_text": dict(intermediate_size=128, intermediate_size_mlp=512, num_local_experts=8, num_experts_per_tok=1,
                        interleave_moe_layer_step=2, head_dim=64),
}
# fmt: on


def _block_linears(model_type: str, fields: dict) -> tuple[int, int, int]:
    """(r x (in + out) over every nn.Linear in the decoder blocks, as PEFT's all-linear adapts them; their weights;
    the weights of those whose type is exactly nn.Linear, which bitsandbytes stores in 4 bits under QLoRA)."""
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **SIZES, **fields))
    linears = [m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and ".layers." in name]
    assert linears, "the blocks hold linear modules"
    adapters = sum(RANK * (m.in_features + m.out_features) for m in linears)
    weights = sum(m.weight.numel() for m in linears)
    return adapters, weights, sum(m.weight.numel() for m in linears if type(m) is torch.nn.Linear)


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_lora_adapts_what_peft_all_linear_finds(model_type):
    fields = FAMILIES[model_type]
    spec = spec_from_hf_config({"model_type": model_type, **SIZES, **fields}, name="small")
    reference, weights, four_bit = _block_linears(model_type, fields)
    assert rank_params(spec, TrainingConfig(lora_rank=RANK)).trainable == reference
    # QLoRA: the routed experts (fused tensors) keep their 16 bits, as does a router that subclasses nn.Linear.
    assert rank_params(spec, TrainingConfig(lora_rank=RANK, qlora=True)).quantized == four_bit
    # Every token multiplies by each adapted matrix (the routed experts hold none), so the FLOPs count the same,
    # and QLoRA's dequantisation reads those weights (planner/throughput/compute.py).
    shape = model_shape(spec)
    assert lora_params_per_token(shape, RANK) == pytest.approx(reference, rel=1e-12)
    assert sum(i * o * n for i, o, n in shape.lora_shapes) * SIZES["num_hidden_layers"] == pytest.approx(weights)


def test_a_moe_model_adapts_its_attention_not_its_experts():
    """Qwen3-30B-A3B from the catalog: 48 blocks of q (2048 -> 4096), k and v (2048 -> 512) and o (4096 -> 2048)."""
    from planner.models.resolve import resolve_model

    spec = resolve_model("qwen3-30b-a3b")
    per_block = 16 * ((2048 + 4096) + 2 * (2048 + 512) + (4096 + 2048))
    assert rank_params(spec, TrainingConfig(lora_rank=16)).trainable == 48 * per_block
