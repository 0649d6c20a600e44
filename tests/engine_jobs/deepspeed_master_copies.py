"""Bytes DeepSpeed's ZeRO optimizer holds per rank after one step, at fp32 and bf16, stages 1-3.

Run under torchrun (2 CPU ranks, gloo); rank 0 prints one `RESULT {json}` line per case.
Every tensor reachable from the optimizer's attributes, its inner optimizer's state and the
module's parameters is counted once per storage (deduplicated by storage pointer).
"""

from __future__ import annotations

import json
import os

import deepspeed
import torch
from torch import nn

WIDTH, LAYERS = 256, 8


def _tensors(obj: object, depth: int = 0):
    if depth > 4:
        return
    if isinstance(obj, torch.Tensor):
        yield obj
        if obj.grad is not None:
            yield obj.grad
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors(value, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _tensors(value, depth + 1)


def held_bytes(engine) -> int:
    roots = [*vars(engine.optimizer).values(), engine.optimizer.optimizer.state, *engine.module.parameters()]
    seen: set[int] = set()
    total = 0
    for tensor in _tensors(roots):
        storage = tensor.untyped_storage()
        if storage.nbytes() == 0 or storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total


def run(stage: int, precision: str) -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS)])
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
        # Threshold 0: ZeRO-3 partitions every parameter (the default keeps small ones whole on each rank).
        "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0},
        "bf16": {"enabled": precision == "bf16"},
    }
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    loss = engine(torch.randn(2, WIDTH, dtype=dtype)).float().pow(2).mean()
    engine.backward(loss)
    engine.step()
    result = {"stage": stage, "precision": precision, "params": WIDTH * WIDTH * LAYERS, "bytes": held_bytes(engine)}
    engine.destroy()
    return result


def main() -> None:
    for stage in (1, 2, 3):
        for precision in ("fp32", "bf16"):
            result = run(stage, precision)
            if int(os.environ["RANK"]) == 0:
                print("RESULT", json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
