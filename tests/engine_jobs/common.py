"""Shared pieces of the engine's torchrun test jobs: the tiny model, its data, the single-process reference."""

from __future__ import annotations

from typing import Any

import torch

from backends.weights.model_factory import build_causal_lm, catalog_config, tiny_config

SEQ = 16
VOCAB = 512


def start_group() -> None:
    """The gloo process group, unless tests/engine_jobs/one_launch.py started it for an earlier job of its launch."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo")


def tiny_gpt2() -> dict[str, Any]:
    return tiny_config(catalog_config("gpt2"), layers=3, vocab_size=VOCAB)


def global_batches(steps: int, rows: int, seed: int = 1234) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (rows, SEQ), generator=generator) for _ in range(steps)]


def reference_run(
    config: dict[str, Any], batches: list[torch.Tensor], *, lr: float, weight_decay: float, clip: float
) -> tuple[list[float], dict[str, torch.Tensor], list[float]]:
    """Plain single-process training on each whole global batch: losses, final parameters, grad norms."""
    model = build_causal_lm(config, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses, norms = [], []
    for batch in batches:
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip if clip > 0 else float("inf"))
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss))
        norms.append(float(norm))
    return losses, {name: param.detach().clone() for name, param in model.named_parameters()}, norms


def engine_config(
    stage: int,
    *,
    micro: int,
    accum: int,
    clip: float,
    lr: float,
    weight_decay: float,
    bucket: int = 20000,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accum,
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "weight_decay": weight_decay}},
        "zero_optimization": {"stage": stage, "reduce_bucket_size": bucket},
        "gradient_clipping": clip,
        **extra,
    }


def rank_rows(batch: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    rows = batch.shape[0] // world
    return batch[rank * rows : (rank + 1) * rows]


def full_parameters(engine: Any) -> dict[str, torch.Tensor]:
    """The engine's model parameters, gathered (ZeRO-3) and cast to fp32."""
    optimizer = engine.optimizer
    gather = getattr(optimizer, "gathered_parameters", None)
    if gather:
        gather()
    values = {name: param.detach().float().clone() for name, param in engine.module.named_parameters()}
    if gather:
        optimizer.release_parameters()
    return values
