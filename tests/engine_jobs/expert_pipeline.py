"""torchrun job (4 ranks): the tiny Mixtral pipelined, its experts over ep or its layers over tp; Qwen3-MoE over
tp; DeepSeek-V3 pipelined.

argv: OUT. Each run trains STEPS steps of micro-batch 1 x 2 micro-batches per data-parallel rank (rank r of dp
trains rows 2r and 2r + 1 of tests/expert_parallel_model.py's global batch), then evaluates its rows:
- ep2-pp2-full: ep 2 x pp 2 (1F1B) with full activation checkpointing (the routers' recomputation in backward
  must not add to the load-balancing sums);
- ep2-pp2-interleaved: ep 2 x pp 2 x 2 interleaved chunks over the map 0, 1, 1, 0 (the first chunk runs the
  embedding alone and hands on empty router sums, the last the head alone);
- tp2-pp2-sp: tp 2 x pp 2 with sequence parallelism (one data-parallel rank);
- qwen3-moe-ep2-tp2-sp: the tiny Qwen3-MoE (QK-norm attention) under ep 2 x tp 2 with sequence parallelism;
- deepseek-v3-ep2-pp2, deepseek-v2-ep2-pp2: the tiny DeepSeek-V3 and V2 (a dense first block, latent attention,
  no router loss) under ep 2 x pp 2;
and ep2-pp2-full's and tp2-pp2-sp's checkpoints after step 2 are resumed under ep 2 x tp 2 and tp 4 (RESHARD).
Each rank writes OUT.<rank>.json: per run the losses, gradient norms, evaluation loss, parameters held, the
data-parallel world and rank, and the resumed run's step 3 beside the saving run's; and the error that refuses
DeepSeek-V3 under tp.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch.distributed as dist

import backends
from planner.errors import UserInputError
from tests.engine_jobs.common import start_group
from tests.expert_parallel_model import (
    LR,
    STEPS,
    global_batch,
    tiny_deepseek_v2,
    tiny_deepseek_v3,
    tiny_mixtral,
    tiny_qwen3_moe,
)

ACCUM = 2  # micro-batches of one row per data-parallel rank and step
RUNS: dict[str, dict[str, Any]] = {
    "ep2-pp2-full": {"layout": {"ep": 2, "pp": 2}, "activation_checkpointing": "full"},
    "ep2-pp2-interleaved": {
        "layout": {"ep": 2, "pp": 2, "virtual_stages": 2, "stage_layers": [0, 1, 1, 0]},
        "pipeline_schedule": "interleaved-1f1b",
    },
    "tp2-pp2-sp": {"layout": {"tp": 2, "pp": 2}, "sequence_parallel": True},
    "qwen3-moe-ep2-tp2-sp": {"layout": {"ep": 2, "tp": 2}, "sequence_parallel": True},
    "deepseek-v3-ep2-pp2": {"layout": {"ep": 2, "pp": 2}},
    "deepseek-v2-ep2-pp2": {"layout": {"ep": 2, "pp": 2}},
}
MODELS = {  # (the others: tiny_mixtral)
    "qwen3-moe-ep2-tp2-sp": tiny_qwen3_moe,
    "deepseek-v3-ep2-pp2": tiny_deepseek_v3,
    "deepseek-v2-ep2-pp2": tiny_deepseek_v2,
}


def config(block: dict[str, Any]) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": ACCUM,
        "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": 0.0}},
        "zero_optimization": {"stage": 1},
        "hardware_selector": block,
    }


def rows(engine: Any, step: int) -> Any:
    world, rank = engine.data_parallel_world, engine.data_parallel_rank
    return global_batch(step, world)[rank * ACCUM : (rank + 1) * ACCUM]


def train(engine: Any, steps: range) -> tuple[list[float], list[float]]:
    losses, norms = [], []
    for step in steps:
        losses.append(engine.train_batch(rows(engine, step)))
        norms.append(engine.optimizer.last_grad_norm)
    return losses, norms


# A checkpoint after step 2 of a pipelined run, resumed under a layout without pp, must take the saving run's
# step 3. (Each stage records only its own layers' tensors; the checkpoint holds every stage's record.)
RESHARD = {
    "ep2-pp2-full": ("ep2-pp2->ep2-tp2", {"layout": {"ep": 2, "tp": 2}, "sequence_parallel": True}),
    "tp2-pp2-sp": ("tp2-pp2->tp4", {"layout": {"tp": 4}, "sequence_parallel": True}),
}


def run(name: str, out: str) -> dict[str, Any]:
    engine, _, _, _ = backends.initialize(model=MODELS.get(name, tiny_mixtral)(), config=config(RUNS[name]))
    losses, norms = train(engine, range(STEPS - 1))
    if name in RESHARD:
        engine.save_checkpoint(f"{out}.{name}")
    last_loss, last_norm = train(engine, range(STEPS - 1, STEPS))
    result = {
        "losses": losses + last_loss,
        "norms": norms + last_norm,
        "eval": engine.eval_loss(rows(engine, STEPS)),
        "held": sum(param.numel() for param in engine.module.parameters()),
        "world": engine.data_parallel_world,
        "dp_rank": engine.data_parallel_rank,
    }
    if name in RESHARD:
        move, target = RESHARD[name]
        resumed = backends.initialize(model=tiny_mixtral(), config=config(target))[0]
        resumed.load_checkpoint(f"{out}.{name}")
        next_loss, _ = train(resumed, range(STEPS - 1, STEPS))
        result["reshard"] = {"move": move, "uninterrupted": last_loss[0], "resumed": next_loss[0]}
    return result


def main(argv: list[str]) -> None:
    out = argv[0]
    start_group()
    results: dict[str, Any] = {name: run(name, out) for name in RUNS}
    try:  # DeepSeek's plan pipelines it but does not split it over tp: one line, on every rank
        backends.initialize(model=tiny_deepseek_v3(), config=config({"layout": {"ep": 2, "tp": 2}}))
    except UserInputError as error:
        results["deepseek_tp_refused"] = str(error)
    with open(f"{out}.{dist.get_rank()}.json", "w") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main(sys.argv[1:])
    exit_worker(0)  # gloo's threads can abort interpreter teardown after a run that succeeded
