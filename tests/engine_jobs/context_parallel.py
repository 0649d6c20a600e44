"""torchrun job: a tiny Llama trained by the engine with each sequence split over layout.cp ranks.

argv: OUT CP [TP]. Runs ZeRO-0 to ZeRO-3. Each rank writes OUT.<rank>.json: per stage its losses, gradient
norms and final parameters (the whole model's, gathered over tp), and the evaluation loss of the first batch
after training.
"""

from __future__ import annotations

import json
import sys

import torch.distributed as dist

import backends
from backends.checkpoint.export import consolidated_state_dict
from tests.context_parallel_model import MICRO, STEPS, engine_config, global_batch, tiny_llama
from tests.engine_jobs.common import start_group


def run(stage: int, cp: int, tp: int) -> dict:
    engine, _, _, _ = backends.initialize(model=tiny_llama(), config=engine_config(stage, cp, tp))
    replicas, replica = engine.data_parallel_world, engine.data_parallel_rank
    losses, norms = [], []
    for step in range(STEPS):
        ids = global_batch(step, replicas)[replica * MICRO : (replica + 1) * MICRO]
        engine.backward(engine(input_ids=ids, labels=ids))
        engine.step()
        losses.append(engine.last_loss)
        norms.append(engine.optimizer.last_grad_norm)
    evaluation = engine.eval_loss({"input_ids": global_batch(0, 1)})
    params = {name: p.detach().flatten().tolist() for name, p in consolidated_state_dict(engine).items()}
    return {"losses": losses, "norms": norms, "params": params, "eval": evaluation, "replicas": replicas}


def main(argv: list[str]) -> None:
    out, cp = argv[0], int(argv[1])
    tp = int(argv[2]) if len(argv) > 2 else 1
    start_group()
    results = {f"zero{stage}": run(stage, cp, tp) for stage in (0, 1, 2, 3)}
    with open(f"{out}.{dist.get_rank()}.json", "w") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main(sys.argv[1:])
    exit_worker(0)  # gloo's threads can abort interpreter teardown after a run that succeeded
