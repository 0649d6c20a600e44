"""torchrun job: ZeRO-0/1/2/3 x {accumulation, clipping} against a single-process reference; JSON to argv[1].

Also records, per run, whether any collective ran on a non-boundary micro-step
and how many stage-2/3 reduce-scatters were launched while backward was still
running (the overlap), and runs bf16 and an fp16 injected-overflow check.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

import backends
from backends.weights.model_factory import build_causal_lm
from tests.engine_jobs.common import (
    engine_config,
    full_parameters,
    global_batches,
    rank_rows,
    reference_run,
    tiny_gpt2,
)

STEPS, MICRO, LR, WD = 5, 2, 1e-3, 0.01


class CountingComm:
    """Wraps the engine's DataParallelComm to count gradient reductions and those launched inside backward."""

    def __init__(self, comm):
        self.inner, self.calls, self.in_backward = comm, 0, 0
        self.all_gather = comm.all_gather  # ZeRO-3 gathers parameters on every micro-step, by design
        for name in ("reduce_scatter", "all_reduce"):
            setattr(self, name, self._counted(getattr(comm, name)))

    def _counted(self, method):
        def call(*args, **kwargs):
            self.calls += 1
            self.in_backward += torch._C._current_graph_task_id() != -1
            return method(*args, **kwargs)

        return call

    def __getattr__(self, name):
        return getattr(self.inner, name)


def run_engine(cfg, stage, accum, clip, batches, rank, world, recompute="none"):
    model = build_causal_lm(cfg, seed=0)
    projection_calls = []  # an attention projection runs twice per micro-step when it is recomputed
    model.transformer.h[0].attn.c_attn.register_forward_hook(lambda *_: projection_calls.append(1))
    engine, _, _, _ = backends.initialize(
        model=model,
        config=engine_config(
            stage,
            micro=MICRO,
            accum=accum,
            clip=clip,
            lr=LR,
            weight_decay=WD,
            hardware_selector={"activation_checkpointing": recompute},
        ),
    )
    counter = CountingComm(engine.optimizer.comm)
    engine.optimizer.comm = counter
    losses, non_boundary_calls = [], 0
    for batch in batches:
        micro_batches = rank_rows(batch, rank, world).chunk(accum)
        for index, micro in enumerate(micro_batches):
            before = counter.calls
            loss = engine(micro)
            engine.backward(loss)
            if index < accum - 1:
                non_boundary_calls += counter.calls - before
            engine.step()
        losses.append(engine.last_loss)
    runs_per_micro_step = len(projection_calls) / (len(batches) * accum)
    return (
        losses,
        full_parameters(engine),
        non_boundary_calls,
        counter.in_backward,
        len(engine.optimizer.units),
        runs_per_micro_step,
    )


def max_diff(a, b):
    return max(float((a[name] - b[name]).abs().max()) for name in b)


def main(out_path: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    cfg = tiny_gpt2()
    results = []
    for accum in (1, 2):
        batches = global_batches(STEPS, MICRO * accum * world)
        for clip in (0.0, 0.5):
            ref_losses, ref_params, ref_norms = reference_run(cfg, batches, lr=LR, weight_decay=WD, clip=clip)
            runs = [(stage, "none") for stage in (0, 1, 2, 3)]
            if accum == 2 and clip:
                runs += [(3, "full"), (2, "selective"), (3, "op")]  # recomputation must not change the numbers
            for stage, recompute in runs:
                losses, params, quiet, overlapped, units, projection_runs = run_engine(
                    cfg, stage, accum, clip, batches, rank, world, recompute
                )
                results.append(
                    {
                        "stage": stage,
                        "accum": accum,
                        "clip": clip,
                        "units": units,
                        "recompute": recompute,
                        "projection_runs_per_micro_step": projection_runs,
                        "loss_diff": max(abs(a - b) for a, b in zip(losses, ref_losses)),
                        "param_diff": max_diff(params, ref_params),
                        "clipped_steps": sum(norm > clip for norm in ref_norms) if clip else 0,
                        "non_boundary_collectives": quiet,
                        "collectives_in_backward": overlapped,
                        "losses": losses,
                        "reference_losses": ref_losses,
                    }
                )
    summary = {
        "world": world,
        "runs": results,
        "bf16": bf16_run(cfg, rank, world),
        "fp16": fp16_overflow(cfg, rank, world),
    }
    if rank == 0:
        with open(out_path, "w", encoding="utf-8") as handle:
            json.dump(summary, handle)
    dist.destroy_process_group()


def bf16_run(cfg, rank, world):
    batches = global_batches(STEPS, MICRO * world)
    ref_losses, _, _ = reference_run(cfg, batches, lr=LR, weight_decay=WD, clip=0.0)
    engine, _, _, _ = backends.initialize(
        model=build_causal_lm(cfg, seed=0),
        config=engine_config(2, micro=MICRO, accum=1, clip=0.0, lr=LR, weight_decay=WD, bf16={"enabled": True}),
    )
    losses = [engine.train_batch(rank_rows(batch, rank, world)) for batch in batches]
    dtypes = sorted({str(param.dtype) for param in engine.module.parameters()})
    return {
        "losses": losses,
        "reference_losses": ref_losses,
        "param_dtypes": dtypes,
        "master_dtype": str(engine.optimizer.master.dtype),
    }


def fp16_overflow(cfg, rank, world):
    """Rank 1's loss becomes inf on step 2: every rank must skip that step and halve the scale."""
    batches = global_batches(4, MICRO * world)
    engine, _, _, _ = backends.initialize(
        model=build_causal_lm(cfg, seed=0),
        config=engine_config(
            1,
            micro=MICRO,
            accum=1,
            clip=0.0,
            lr=LR,
            weight_decay=WD,
            fp16={"enabled": True, "initial_scale_power": 8, "hysteresis": 1, "loss_scale_window": 2},
        ),
    )
    scales, changed = [], []
    for step, batch in enumerate(batches):
        before = full_parameters(engine)
        loss = engine(rank_rows(batch, rank, world)).loss
        if step == 1 and rank == world - 1:
            loss = loss * float("inf")
        engine.backward(loss)
        engine.step()
        scales.append(engine.loss_scale)
        changed.append(max_diff(full_parameters(engine), before) > 0)
    return {"scales": scales, "params_changed": changed, "skipped": engine.optimizer.skipped_steps}


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main(sys.argv[1])
    exit_worker(0)
