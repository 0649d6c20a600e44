"""torchrun job (run with --max-restarts): a rank dies mid-step, torchrun restarts, training resumes.

Attempt 0 first trains uninterrupted (the reference curve), then starts the
checkpointed run, checkpointing every 2 steps; rank 1 exits in the middle of
step 4. Attempt 1 loads the newest checkpoint and finishes. ZeRO-3, fp16 with
the dynamic loss scaler, a warmup schedule, clipping and dropout, so that
model, optimizer, scheduler, scaler, data position and RNG must all resume.

The uninterrupted run also saves asynchronously (checkpoint.async_save) after
steps 2 and 4 and trains on while the writes are in flight; a fresh engine
then resumes from the step-2 one (async_resume.json).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import backends
from backends.checkpoint.export import consolidated_state_dict
from backends.data import SyntheticTokens, micro_batches
from backends.distributed_init import init_distributed
from backends.weights.model_factory import build_causal_lm
from tests.engine_jobs.common import SEQ, VOCAB, engine_config, tiny_gpt2

STEPS, MICRO, ACCUM, KILL_AT = 6, 2, 2, 4


def fresh_engine(rank, *, async_save=False):
    model = build_causal_lm(tiny_gpt2(), seed=0, dropout=0.1)
    config = engine_config(
        3,
        micro=MICRO,
        accum=ACCUM,
        clip=1.0,
        lr=1e-3,
        weight_decay=0.01,
        fp16={"enabled": True, "initial_scale_power": 12, "loss_scale_window": 3},
        scheduler={"type": "WarmupLR", "params": {"warmup_num_steps": 4, "warmup_max_lr": 1e-3}},
        hardware_selector={"checkpoint": {"keep_last": 2, "async_save": async_save}},
    )
    engine, _, _, _ = backends.initialize(model=model, config=config)
    torch.manual_seed(100 + rank)
    return engine


def train(engine, rank, world, *, start_step, on_step, kill=False):
    stream = micro_batches(
        SyntheticTokens(40, SEQ, VOCAB, seed=3),
        micro_batch=MICRO,
        rank=rank,
        world=world,
        start_sample=engine.global_samples,
    )
    for step in range(start_step, STEPS):
        for micro in range(ACCUM):
            loss = engine(next(stream))
            if kill and step == KILL_AT and micro == 1 and rank == 1:
                os._exit(17)  # a crash in the middle of a step
            engine.backward(loss)
            engine.step()
        on_step(step, engine)


def max_difference(first, second):
    return max((first[name] - second[name]).abs().max().item() for name in first)


def uninterrupted_with_async_saves(out, rank, world):
    """The reference losses, from a run that saves asynchronously after steps 2 and 4 and never waits mid-run."""
    ckpt, reference, seen = out / "async_ckpt", [], {}

    def on_step(step, engine):
        reference.append(engine.last_loss)
        if step in (1, 3):
            before = consolidated_state_dict(engine)
            engine.save_checkpoint(ckpt)
            seen[f"masters_at_step{step + 1}"] = before
            seen[f"partial_after_save{step + 1}"] = sorted(p.name for p in ckpt.iterdir() if p.is_dir())

    engine = fresh_engine(rank, async_save=True)
    train(engine, rank, world, start_step=0, on_step=on_step)
    final = consolidated_state_dict(engine)
    engine.close()
    resumed_engine = fresh_engine(rank)
    resumed_from, _ = resumed_engine.load_checkpoint(ckpt, tag="global_step2")
    saved = consolidated_state_dict(resumed_engine)
    resumed = []
    train(
        resumed_engine,
        rank,
        world,
        start_step=resumed_engine.global_steps,
        on_step=lambda step, engine: resumed.append(engine.last_loss),
    )
    if rank == 0:
        (out / "async_resume.json").write_text(
            json.dumps(
                {
                    "resumed_from": resumed_from,
                    "resumed_losses": resumed,
                    "folders_after_save": [seen["partial_after_save2"], seen["partial_after_save4"]],
                    "folders_after_close": sorted(p.name for p in ckpt.iterdir()),
                    "saved_vs_step2": max_difference(saved, seen["masters_at_step2"]),
                    "saved_vs_final": max_difference(saved, final),
                }
            )
        )
    return reference


def main(out_dir: str) -> None:
    out = Path(out_dir)
    init_distributed("gloo")  # per-attempt store prefix: a restarted rank must not read stale addresses
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if attempt == 0:
        reference = uninterrupted_with_async_saves(out, rank, world)
        if rank == 0:
            (out / "uninterrupted.json").write_text(json.dumps(reference))
    engine = fresh_engine(rank)
    resumed_from, _ = engine.load_checkpoint(out / "ckpt")

    def record(step, engine):
        if rank == 0:
            with open(out / "losses.jsonl", "a", encoding="utf-8") as handle:
                handle.write(
                    json.dumps(
                        {
                            "attempt": attempt,
                            "step": step,
                            "loss": engine.last_loss,
                            "resumed_from": resumed_from,
                            "scale": engine.loss_scale,
                        }
                    )
                    + "\n"
                )
        if (step + 1) % 2 == 0:
            engine.save_checkpoint(out / "ckpt")

    train(engine, rank, world, start_step=engine.global_steps, on_step=record, kill=attempt == 0)
    engine.export_consolidated(out / "consolidated.safetensors")
    dist.destroy_process_group()


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main(sys.argv[1])
    exit_worker(0)
