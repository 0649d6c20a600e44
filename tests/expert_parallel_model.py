"""The tiny Mixtral, its batches and its optimizer, shared by tests/test_expert_parallel_engine.py (the
single-process reference) and tests/engine_jobs/expert_parallel.py (the engine under ep)."""

from __future__ import annotations

import math
from typing import Any

STEPS, MICRO, LR = 3, 2, 2e-3
CAPACITY_FACTOR = 0.5  # at half an even share, some experts get more than their capacity
SEQ, VOCAB = 16, 128


def tiny_mixtral() -> Any:
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    config = MixtralConfig(
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        output_router_logits=True,  # the router's load-balancing loss is part of the loss
        router_aux_loss_coef=0.05,
    )
    return MixtralForCausalLM(config).float().train()


def tiny_qwen2_moe() -> Any:
    """Qwen2-MoE's layout: routed experts beside an always-on shared expert with its sigmoid gate."""
    import torch
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    torch.manual_seed(0)
    config = Qwen2MoeConfig(
        hidden_size=32,
        intermediate_size=48,
        moe_intermediate_size=24,
        shared_expert_intermediate_size=40,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        output_router_logits=True,
        router_aux_loss_coef=0.05,
    )
    return Qwen2MoeForCausalLM(config).float().train()


def tiny_qwen3_moe() -> Any:
    """Qwen3-MoE's layout: fine-grained routed experts, no shared expert, QK-norm attention."""
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    config = Qwen3MoeConfig(
        hidden_size=32, intermediate_size=48, moe_intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, num_experts=4, num_experts_per_tok=2, vocab_size=VOCAB,
        max_position_embeddings=64, output_router_logits=True, router_aux_loss_coef=0.05,
    )  # fmt: skip
    return Qwen3MoeForCausalLM(config).float().train()


def tiny_deepseek_v3() -> Any:
    """DeepSeek-V3's layout: a leading dense block, then routed experts (sigmoid scores with a bias, group-limited
    top-k) beside a shared expert; latent attention."""
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(0)
    config = DeepseekV3Config(
        hidden_size=32, intermediate_size=48, moe_intermediate_size=24, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
        n_group=1, topk_group=1, kv_lora_rank=16, q_lora_rank=None, qk_nope_head_dim=8, qk_rope_head_dim=8,
        v_head_dim=8, vocab_size=VOCAB, max_position_embeddings=64,
    )  # fmt: skip
    return DeepseekV3ForCausalLM(config).float().train()


def tiny_deepseek_v2() -> Any:
    """DeepSeek-V2(-Lite)'s layout: a leading dense block, then greedy top-k routed experts (softmax scores) beside
    shared experts; latent attention with no query compression."""
    import torch
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    torch.manual_seed(0)
    config = DeepseekV2Config(
        hidden_size=32, intermediate_size=48, moe_intermediate_size=24, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
        kv_lora_rank=16, q_lora_rank=None, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, vocab_size=VOCAB,
        max_position_embeddings=64,
    )  # fmt: skip
    return DeepseekV2ForCausalLM(config).float().train()


MODELS = {
    "mixtral": tiny_mixtral,
    "qwen2_moe": tiny_qwen2_moe,
    "qwen3_moe": tiny_qwen3_moe,
    "deepseek_v3": tiny_deepseek_v3,
}


def global_batch(step: int, world: int) -> Any:
    """The step's token ids for all data-parallel ranks: rank r trains rows r*MICRO ... (r+1)*MICRO - 1."""
    import torch

    generator = torch.Generator().manual_seed(1000 + step)
    return torch.randint(0, VOCAB, (MICRO * world, SEQ), generator=generator)


def engine_config(stage: int, ep: int, capacity_factor: float = 0.0) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": 0.0}},
        "zero_optimization": {"stage": stage},
        "hardware_selector": {"layout": {"ep": ep}, "expert_capacity_factor": capacity_factor},
    }


def reference_run(world: int, make=tiny_mixtral, count_routes: bool = True) -> tuple[list, list, dict, list[int]]:
    """Losses, gradient norms, final parameters, and per rank the first step's assignments over capacity."""
    import torch

    model = make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    routes: list = []
    layers = model.model.layers if count_routes else []
    hooks = [layer.mlp.gate.register_forward_hook(lambda module, args, out: routes.append(out[2])) for layer in layers]
    losses, norms, over_capacity = [], [], []
    for step in range(STEPS):
        chunks = global_batch(step, world).split(MICRO)
        loss = torch.zeros(())
        for chunk in chunks:
            routes.clear()
            loss = loss + model(input_ids=chunk, labels=chunk).loss / world
            if step == 0 and count_routes:
                experts = getattr(model.config, "num_local_experts", None) or model.config.num_experts
                k, tokens = model.config.num_experts_per_tok, chunk.numel()
                capacity = math.ceil(CAPACITY_FACTOR * tokens * k / experts)
                counts = [torch.bincount(route.reshape(-1), minlength=experts) for route in routes]
                over_capacity.append(sum(int((count - capacity).clamp(min=0).sum()) for count in counts))
        loss.backward()
        norms.append(float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))))
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    for hook in hooks:
        hook.remove()
    return losses, norms, {name: p.detach() for name, p in model.named_parameters()}, over_capacity
