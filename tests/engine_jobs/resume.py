"""torchrun job (run with --max-restarts): a rank dies mid-step, torchrun restarts, training resumes.

Attempt 0 first trains uninterrupted (the reference curve), then starts the
checkpointed run, checkpointing every 2 steps; rank 1 exits in the middle of
step 4. Attempt 1 loads the newest checkpoint and finishes. ZeRO-3, fp16 with
the dynamic loss scaler, a warmup schedule, clipping and dropout, so that
model, optimizer, scheduler, scaler, data position and RNG must all resume.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import backends
from backends.distributed_init import init_distributed
from backends.data import SyntheticTokens, micro_batches
from backends.model_factory import build_causal_lm
from tests.engine_jobs.common import SEQ, VOCAB, engine_config, tiny_gpt2

STEPS, MICRO, ACCUM, KILL_AT = 6, 2, 2, 4


def fresh_engine(rank):
    model = build_causal_lm(tiny_gpt2(), seed=0, dropout=0.1)
    config = engine_config(3, micro=MICRO, accum=ACCUM, clip=1.0, lr=1e-3, weight_decay=0.01,
                           fp16={"enabled": True, "initial_scale_power": 12, "loss_scale_window": 3},
                           scheduler={"type": "WarmupLR", "params": {"warmup_num_steps": 4, "warmup_max_lr": 1e-3}},
                           hardware_selector={"checkpoint": {"keep_last": 2}})
    engine, _, _, _ = backends.initialize(model=model, config=config)
    torch.manual_seed(100 + rank)
    return engine


def train(engine, rank, world, *, start_step, on_step, kill=False):
    stream = micro_batches(SyntheticTokens(40, SEQ, VOCAB, seed=3), micro_batch=MICRO, rank=rank, world=world,
                           start_sample=engine.global_samples)
    for step in range(start_step, STEPS):
        for micro in range(ACCUM):
            loss = engine(next(stream))
            if kill and step == KILL_AT and micro == 1 and rank == 1:
                os._exit(17)  # a crash in the middle of a step
            engine.backward(loss)
            engine.step()
        on_step(step, engine)


def main(out_dir: str) -> None:
    out = Path(out_dir)
    init_distributed("gloo")  # per-attempt store prefix: a restarted rank must not read stale addresses
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if attempt == 0:
        reference = []
        train(fresh_engine(rank), rank, world, start_step=0,
              on_step=lambda step, engine: reference.append(engine.last_loss))
        if rank == 0:
            (out / "uninterrupted.json").write_text(json.dumps(reference))
    engine = fresh_engine(rank)
    resumed_from, _ = engine.load_checkpoint(out / "ckpt")

    def record(step, engine):
        if rank == 0:
            with open(out / "losses.jsonl", "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"attempt": attempt, "step": step, "loss": engine.last_loss,
                                         "resumed_from": resumed_from, "scale": engine.loss_scale}) + "\n")
        if (step + 1) % 2 == 0:
            engine.save_checkpoint(out / "ckpt")

    train(engine, rank, world, start_step=engine.global_steps, on_step=record, kill=attempt == 0)
    engine.export_consolidated(out / "consolidated.safetensors")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
