"""The tiny Llama, its batches and its optimizer, shared by tests/test_context_parallel_engine.py (the
single-process reference) and tests/engine_jobs/context_parallel.py (the engine under cp)."""

from __future__ import annotations

from typing import Any

STEPS, MICRO, LR, SEQ, VOCAB = 3, 2, 2e-3, 256, 128


def tiny_llama() -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped: the ranks exchange 2 key/value heads, attention repeats them
        vocab_size=VOCAB,
        max_position_embeddings=SEQ,
    )
    return LlamaForCausalLM(config).float().train()


def global_batch(step: int, replicas: int) -> Any:
    """The step's token ids for all data-parallel replicas: replica d trains rows d*MICRO ... (d+1)*MICRO - 1."""
    import torch

    generator = torch.Generator().manual_seed(2000 + step)
    return torch.randint(0, VOCAB, (MICRO * replicas, SEQ), generator=generator)


def engine_config(stage: int, cp: int, tp: int = 1) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 0.5,  # every step clipped: the engine's norm must be the whole model's
        "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": 0.0}},
        "zero_optimization": {"stage": stage},
        # With tp, sequence parallelism on, as the planner's tp layouts run.
        "hardware_selector": {"layout": {"cp": cp, "tp": tp}, "seq_len": SEQ, "sequence_parallel": tp > 1},
    }
