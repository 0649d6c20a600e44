"""torchrun job: a tiny Mixtral trained by the engine with its experts split over layout.ep.

argv: OUT EP [FAMILY ...]. Runs ZeRO-0 to ZeRO-3 with no capacity limit, then once with a small capacity factor;
with FAMILYs (tests/expert_parallel_model.py MODELS), each family's model under ZeRO-1 only.
Each rank writes OUT.<rank>.json: per run its losses and gradient norms, its parameters after the steps
(its own experts under their global index), and the assignments it dropped at the first step.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch.distributed as dist

import backends
from tests.engine_jobs.common import start_group
from tests.expert_parallel_model import CAPACITY_FACTOR, MICRO, MODELS, STEPS, engine_config, global_batch, tiny_mixtral


def run(stage: int, ep: int, capacity_factor: float, make: Any = tiny_mixtral) -> dict:
    engine, _, _, _ = backends.initialize(model=make(), config=engine_config(stage, ep, capacity_factor))
    world, rank = engine.data_parallel_world, engine.data_parallel_rank
    losses, norms, dropped = [], [], 0
    experts = [(name, module) for name, module in engine.module.named_modules() if hasattr(module, "first")]
    for step in range(STEPS):
        ids = global_batch(step, world)[rank * MICRO : (rank + 1) * MICRO]
        engine.backward(engine(input_ids=ids, labels=ids))
        if step == 0:  # the first step's routing is the reference's: same weights, same tokens
            dropped = sum(module.dropped for _, module in experts)
        engine.step()
        losses.append(engine.last_loss)
        norms.append(engine.optimizer.last_grad_norm)
    params: dict[str, list[float]] = {}
    if stage == 3:  # ZeRO-3 holds a shard between uses: gather the whole tensors to compare
        engine.optimizer.gathered_parameters()
    for name, module in experts:  # ExpertParallelExperts: name its rows by global expert index
        for local in range(module.local):
            for weight in ("gate_up_proj", "down_proj"):
                params[f"{name}.{weight}.{module.first + local}"] = getattr(module, weight)[local].flatten().tolist()
    for name, param in engine.module.named_parameters():
        if "experts." not in name:
            params[name] = param.detach().flatten().tolist()
    held = sum(param.numel() for param in engine.module.parameters())  # this rank's: its experts, the rest whole
    if stage == 3:
        engine.optimizer.release_parameters()
    return {"losses": losses, "norms": norms, "params": params, "dropped": dropped, "world": world, "held": held}


def _train(engine, steps: range) -> list[float]:
    world, rank = engine.data_parallel_world, engine.data_parallel_rank
    losses = []
    for step in steps:
        ids = global_batch(step, world)[rank * MICRO : (rank + 1) * MICRO]
        engine.backward(engine(input_ids=ids, labels=ids))
        engine.step()
        losses.append(engine.last_loss)
    return losses


def resume_and_export(ep: int, out: str) -> dict:
    """ZeRO-1 under ep: a checkpoint after step 2 resumes into a fresh engine, whose step 3 equals the
    uninterrupted run's; the consolidated export holds every expert (written by rank 0 to OUT.safetensors)."""
    config = engine_config(1, ep)
    first, _, _, _ = backends.initialize(model=tiny_mixtral(), config=config)
    _train(first, range(STEPS - 1))
    first.save_checkpoint(f"{out}.checkpoints")
    uninterrupted = _train(first, range(STEPS - 1, STEPS))
    first.export_consolidated(f"{out}.safetensors")
    resumed_engine, _, _, _ = backends.initialize(model=tiny_mixtral(), config=config)
    resumed_engine.load_checkpoint(f"{out}.checkpoints")
    resumed = _train(resumed_engine, range(STEPS - 1, STEPS))
    same = all(
        bool((a.detach() == b.detach()).all())
        for a, b in zip(first.module.parameters(), resumed_engine.module.parameters(), strict=True)
    )
    return {"uninterrupted": uninterrupted, "resumed": resumed, "same_parameters": same}


def reshard(ep: int, out: str) -> dict:
    """A checkpoint resumes under another ep: the ep run's into ep 1 (and ep 4 on 4 ranks), and a plain run's
    (ep 1) into this ep; each resumed last step against the saving run's own."""
    world = dist.get_world_size()
    results: dict[str, Any] = {}
    for saved_ep, targets in ((ep, [1] + ([4] if world == 4 else [])), (1, [ep])):
        saver, _, _, _ = backends.initialize(model=tiny_mixtral(), config=engine_config(1, saved_ep))
        _train(saver, range(STEPS - 1))
        folder = f"{out}.reshard-from-ep{saved_ep}"
        saver.save_checkpoint(folder)
        uninterrupted = _train(saver, range(STEPS - 1, STEPS))
        for target in targets:
            engine, _, _, _ = backends.initialize(model=tiny_mixtral(), config=engine_config(1, target))
            engine.load_checkpoint(folder)
            results[f"ep{saved_ep}->ep{target}"] = {
                "uninterrupted": uninterrupted,
                "resumed": _train(engine, range(STEPS - 1, STEPS)),
                "step": engine.global_steps,
            }
    return results


def main(argv: list[str]) -> None:
    out, ep = argv[0], int(argv[1])
    start_group()
    if len(argv) > 2:  # other families (one job, as each launch costs its ranks' start-up): ZeRO-1 runs only
        with open(f"{out}.{dist.get_rank()}.json", "w") as handle:
            json.dump({family: run(1, ep, 0.0, MODELS[family]) for family in argv[2:]}, handle)
        return
    # ZeRO shards over the expert-data-parallel group: stages 2 and 3 differ from 1 only where it has 2+ ranks.
    stages = (0, 1, 2, 3) if dist.get_world_size() > ep else (0, 1)
    results = {f"zero{stage}": run(stage, ep, 0.0) for stage in stages}
    results["capacity"] = run(0, ep, CAPACITY_FACTOR)
    results["resume"] = resume_and_export(ep, out)
    results["reshard"] = reshard(ep, out)
    with open(f"{out}.{dist.get_rank()}.json", "w") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main(sys.argv[1:])
    exit_worker(0)  # gloo's threads can abort interpreter teardown after a run that succeeded
