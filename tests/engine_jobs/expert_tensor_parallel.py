"""torchrun job (4 ranks): the tiny Mixtral with its experts over ep and every expert's ffn over tp.

argv: OUT. Runs (name: layout, ZeRO stage, sequence parallelism), each on the same two data-parallel ranks' batches
as tests/expert_parallel_model.py's reference with world 2:
- ep2-tp2-zero{0,1,3}, ep2-tp2-sp-zero2: ep 2 x tp 2;
- ep1-tp2-sp: tp 2 alone, the experts split over tp only, on dp 2 (2 of the 4 ranks' replicas);
- reshard ep2-tp2 -> ep1-tp2 and ep1-tp2 -> ep2-tp2: a checkpoint after step 2 resumed under the other layout.
Each rank writes OUT.<rank>.json (losses, gradient norms, the parameters it holds, the assignments it dropped);
rank 0 writes OUT.<run>.safetensors, the consolidated (HF-named) weights after the steps.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch.distributed as dist

import backends
from backends.checkpoint.export import consolidated_state_dict
from tests.engine_jobs.common import start_group
from tests.expert_parallel_model import LR, MICRO, STEPS, global_batch, tiny_mixtral

RUNS = {
    "ep2-tp2-zero0": (2, 0, False),
    "ep2-tp2-zero1": (2, 1, False),
    "ep2-tp2-zero3": (2, 3, False),
    "ep2-tp2-sp-zero2": (2, 2, True),
    "ep1-tp2-sp": (1, 1, True),
}


def config(ep: int, stage: int, sequence_parallel: bool) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": 0.0}},
        "zero_optimization": {"stage": stage},
        "hardware_selector": {"layout": {"ep": ep, "tp": 2}, "sequence_parallel": sequence_parallel},
    }


def train(engine: Any, steps: range) -> tuple[list[float], list[float]]:
    world, rank = engine.data_parallel_world, engine.data_parallel_rank
    losses, norms = [], []
    for step in steps:
        ids = global_batch(step, world)[rank * MICRO : (rank + 1) * MICRO]
        engine.backward(engine(input_ids=ids, labels=ids))
        engine.step()
        losses.append(engine.last_loss)
        norms.append(engine.optimizer.last_grad_norm)
    return losses, norms


def run(name: str, out: str) -> dict[str, Any]:
    engine, _, _, _ = backends.initialize(model=tiny_mixtral(), config=config(*RUNS[name]))
    losses, norms = train(engine, range(STEPS))
    if RUNS[name][1] == 3:
        engine.optimizer.gathered_parameters()
    held = sum(param.numel() for param in engine.module.parameters())  # this rank's experts' ffn share, all else
    if RUNS[name][1] == 3:
        engine.optimizer.release_parameters()
    full = consolidated_state_dict(engine)
    if dist.get_rank() == 0:
        from safetensors.torch import save_file

        save_file({key: value.contiguous() for key, value in full.items()}, f"{out}.{name}.safetensors")
    return {"losses": losses, "norms": norms, "held": held, "world": engine.data_parallel_world}


def reshard(out: str) -> dict[str, Any]:
    results = {}
    for saved, target in ((2, 1), (1, 2)):
        saver, _, _, _ = backends.initialize(model=tiny_mixtral(), config=config(saved, 1, True))
        train(saver, range(STEPS - 1))
        folder = f"{out}.from-ep{saved}"
        saver.save_checkpoint(folder)
        uninterrupted, _ = train(saver, range(STEPS - 1, STEPS))
        engine, _, _, _ = backends.initialize(model=tiny_mixtral(), config=config(target, 1, True))
        engine.load_checkpoint(folder)
        resumed, _ = train(engine, range(STEPS - 1, STEPS))
        results[f"ep{saved}-tp2->ep{target}-tp2"] = {"uninterrupted": uninterrupted, "resumed": resumed}
    return results


def main(argv: list[str]) -> None:
    out = argv[0]
    start_group()
    results: dict[str, Any] = {name: run(name, out) for name in RUNS}
    results["reshard"] = reshard(out)
    with open(f"{out}.{dist.get_rank()}.json", "w") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main(sys.argv[1:])
    exit_worker(0)  # gloo's threads can abort interpreter teardown after a run that succeeded
