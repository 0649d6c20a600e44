"""Bytes DeepSpeed's ZeRO optimizer, and our engine's (backends/zero/), hold per rank after one step,
at fp32 and bf16, stages 1-3 (the engine's also at stage 0).

Run under torchrun (2 CPU ranks, gloo); rank 0 prints one `RESULT {json}` line per case.
Every tensor reachable from the optimizer's attributes, its inner optimizer's state and the
module's parameters (for the engine also every FlatUnit's buffers: full, local, master and
gradient views) is counted once per storage (deduplicated by storage pointer; freed storages,
resized to 0, count nothing).
"""

from __future__ import annotations

import json
import os

import deepspeed
import torch
from torch import nn

from backends.cpu_distributed import skip_deepspeed_shm_build

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
    return _storage_bytes(
        [*vars(engine.optimizer).values(), engine.optimizer.optimizer.state, *engine.module.parameters()]
    )


def _storage_bytes(roots: list, released: tuple = ()) -> int:
    """Bytes of every distinct storage reachable from roots, less the `released` tensors' storages."""
    seen: set[int] = {tensor.untyped_storage().data_ptr() for tensor in released}
    total = 0
    for tensor in _tensors(roots):
        storage = tensor.untyped_storage()
        if storage.nbytes() == 0 or storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total


def run(stage: int, precision: str) -> dict:
    skip_deepspeed_shm_build()  # held bytes, not collectives, are measured: gloo's own, no JIT build of DeepSpeed's op
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
    result = {
        "strategy": "deepspeed",
        "stage": stage,
        "precision": precision,
        "params": WIDTH * WIDTH * LAYERS,
        "bytes": held_bytes(engine),
    }
    engine.destroy()
    return result


class Blocks(nn.Module):
    """The same eight layers for our engine, in a ModuleList: its ZeRO-3 takes each as a block (flat_unit.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def run_engine(stage: int, precision: str) -> dict:
    """Our engine's ZeRO (the class the engine builds, backends/zero/) with torch's AdamW, one step."""
    from backends.parts.mixed_precision import LossScaler, compute_dtype
    from backends.zero import zero_optimizer_class
    from backends.zero.comm import DataParallelComm
    from planner.contract.engine_config import EngineConfig

    torch.manual_seed(0)
    model = Blocks()
    config = EngineConfig.model_validate(
        {"zero_optimization": {"stage": stage}, "bf16": {"enabled": precision == "bf16"}}
    )
    cls = zero_optimizer_class(stage)
    zero = cls.__new__(cls)
    zero.optimizer_factory = lambda flat: torch.optim.AdamW(flat, lr=1e-3)
    dtype = compute_dtype(config)
    cls.__init__(zero, model, config, DataParallelComm(), dtype, LossScaler(config))
    zero.begin_forward()
    loss = model(torch.randn(2, WIDTH, dtype=dtype)).float().pow(2).mean()
    zero.begin_backward(True)
    loss.backward()
    zero.end_backward(True)
    zero.step()
    zero.zero_grad()
    units = [vars(unit) for unit in zero.units]
    arenas = [arena for arena in (getattr(zero, "arena", None), getattr(zero, "root_arena", None)) if arena]
    roots = [*vars(zero).values(), zero.optimizer.state, *units, *map(vars, arenas), *model.parameters()]
    # ZeRO-1/2 release their gradient arena after the reduction (grad_arena.py): on Linux CPU its pages are
    # handed back with madvise and the storage keeps its size, on a GPU it is resized to 0. Not resident.
    released = tuple(arena.flat for arena in arenas if stage in (1, 2) and arena.wipes_in_place)
    return {"strategy": "engine", "stage": stage, "precision": precision, "params": WIDTH * WIDTH * LAYERS,
            "bytes": _storage_bytes(roots, released), "released_arena": _storage_bytes(roots) - _storage_bytes(roots, released)}  # fmt: skip


def main() -> None:
    # DeepSpeed's stage 0 has no ZeRO optimizer to compare; our engine's stage 0 is its replicated ZeroStage0.
    for runner, stages in ((run, (1, 2, 3)), (run_engine, (0, 1, 2, 3))):
        for stage in stages:
            for precision in ("fp32", "bf16"):
                result = runner(stage, precision)
                if int(os.environ["RANK"]) == 0:
                    print("RESULT", json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
