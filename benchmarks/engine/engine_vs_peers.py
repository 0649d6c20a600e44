"""Benchmark (not a test): our ZeRO-1/2/3 against DeepSpeed ZeRO-1/2/3 and FSDP2 on the same work.

Every run trains the same GPT-2-small-shaped model (the catalog's gpt2
config, fp32, torch AdamW) on 2 CPU ranks (gloo) with the same batch, sequence
length and number of steps, through the same loop: the one runner,
`python -m backends.run`, launched by the benchmark harness
(benchmarks/harness/launch.py) as `run-training-benchmark --run` does, but one
pair to a launch. It reports the median step time after warm-up and the
peak resident memory of the busiest rank, and the ratios ours / DeepSpeed per
stage (goal: <= 1.0 for both).

    python -m benchmarks.engine.engine_vs_peers [--json] [--steps 4] [--seq 128] [--micro 2] [--only ours:1,deepspeed:1]
    python -m benchmarks.engine.engine_vs_peers --smoke [--only ours:1,deepspeed:1]

--only reruns some (engine, stage) pairs; ratios are printed for the stages
that have both ours and DeepSpeed among them. --smoke trains the shrunken
architecture (`backends.run --tiny`) for one step after the warm-up at micro-batch
1 x 32 tokens, and runs only ours:1 unless --only names more: each pair is a
torchrun launch of its own (about ten seconds on two cores), so the smoke run is one.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from benchmarks.harness.jobs import MeasureJob
from benchmarks.harness.launch import backends_run_launch
from planner.training_config import (
    ActivationCheckpointing,
    FsdpSharding,
    Precision,
    Strategy,
    TrainingConfig,
)

RUNS = [("deepspeed", 1), ("deepspeed", 2), ("deepspeed", 3), ("fsdp2", 3), ("ours", 1), ("ours", 2), ("ours", 3)]
SMOKE_RUNS = [("ours", 1)]
WARMUP_STEPS = 1
TIMEOUT_S = 3600
# (steps, micro-batch, tokens per sequence): the full run's and --smoke's (backends.run --tiny trains at most 32).
FULL_SIZES, SMOKE_SIZES = (4, 2, 128), (1, 1, 32)


def training_config(engine_name: str, stage: int, micro: int, seq: int) -> TrainingConfig:
    """The one config each (engine, stage) pair trains: fp32, no activation checkpointing, 2 data-parallel ranks."""
    if engine_name == "fsdp2":
        fields: dict[str, Any] = {"strategy": Strategy.FSDP, "fsdp_sharding": FsdpSharding.FULL}
    elif engine_name == "deepspeed":
        fields = {"strategy": Strategy.DEEPSPEED, "zero_stage": stage}
    else:
        fields = {"strategy": Strategy.ENGINE, "zero_stage": stage}
    return TrainingConfig(
        **fields,
        micro_batch=micro,
        seq_len=seq,
        precision=Precision.FP32,
        activation_checkpointing=ActivationCheckpointing.NONE,
    )


def launch(engine_name: str, stage: int, args: argparse.Namespace) -> dict[str, Any]:
    """One torchrun job of the one runner (`python -m backends.run`) on 2 gloo ranks, as the harness measures."""
    job = MeasureJob(
        key=f"{engine_name}-zero{stage}",
        model="gpt2",
        tiny=args.smoke,
        gpu="cpu",
        config=training_config(engine_name, stage, args.micro, args.seq),
        steps=args.steps,
        warmup=WARMUP_STEPS,
    )
    # One job to a launch: each engine in processes of its own, so no engine's leftovers weigh on another's memory.
    (run,) = backends_run_launch([job], nproc=2, timeout_s=TIMEOUT_S)
    outcome = run.outcome
    result = outcome.results.get(job.key)
    if result is None or result.error or not result.step_times_s:
        detail = result.error if result is not None and result.error else outcome.stderr_tail
        raise RuntimeError(f"{engine_name} stage {stage} failed (exit {outcome.returncode}):\n{detail}")
    return {
        "engine": engine_name,
        "stage": stage,
        "step_time_s": statistics.median(result.step_times_s),
        "peak_rss_bytes": max(result.peak_memory_per_rank_bytes),
        "steps": args.steps,
        "micro_batch": args.micro,
        "seq_len": args.seq,
    }


def ratios(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    by = {(r["engine"], r["stage"]): r for r in results}
    table = {}
    for stage in (1, 2, 3):
        ours, theirs = by.get(("ours", stage)), by.get(("deepspeed", stage))
        if ours and theirs:
            table[f"zero{stage}"] = {
                "step_time": ours["step_time_s"] / theirs["step_time_s"],
                "peak_rss": ours["peak_rss_bytes"] / theirs["peak_rss_bytes"],
            }
    return table


def selected_runs(only: str | None, smoke: bool = False) -> list[tuple[str, int]]:
    """RUNS (SMOKE_RUNS with `smoke`), or the ENGINE:STAGE pairs of `only` (comma-separated), in RUNS order."""
    if not only:
        return SMOKE_RUNS if smoke else RUNS
    wanted = set()
    for item in only.split(","):
        engine_name, _, stage = item.strip().partition(":")
        if not stage.isdigit() or (engine_name, int(stage)) not in RUNS:
            choices = ", ".join(f"{name}:{number}" for name, number in RUNS)
            raise SystemExit(f"--only: {item.strip()!r} is not one of {choices}")
        wanted.add((engine_name, int(stage)))
    return [run for run in RUNS if run in wanted]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--steps", type=int, help=f"timed steps (default {FULL_SIZES[0]}, smoke {SMOKE_SIZES[0]})")
    parser.add_argument("--micro", type=int, help=f"micro-batch (default {FULL_SIZES[1]}, smoke {SMOKE_SIZES[1]})")
    parser.add_argument(
        "--seq", type=int, help=f"tokens per sequence (default {FULL_SIZES[2]}, smoke {SMOKE_SIZES[2]})"
    )
    parser.add_argument("--only", metavar="ENGINE:STAGE,...", help="run only these pairs, e.g. ours:1,deepspeed:1")
    parser.add_argument("--smoke", action="store_true", help="the tiny model, one step, ours:1 unless --only")
    args = parser.parse_args(argv)
    defaults = SMOKE_SIZES if args.smoke else FULL_SIZES
    for name, default in zip(("steps", "micro", "seq"), defaults):
        if getattr(args, name) is None:
            setattr(args, name, default)
        elif getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    runs = selected_runs(args.only, args.smoke)
    results = []
    for engine_name, stage in runs:
        results.append(launch(engine_name, stage, args))
        if not args.json:
            r = results[-1]
            print(
                f"{engine_name:9} zero{stage}  step {r['step_time_s']:.3f} s  peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB",
                flush=True,
            )
    document = {
        "results": results,
        "ratios": {k: v["step_time"] for k, v in ratios(results).items()},
        "memory_ratios": {k: v["peak_rss"] for k, v in ratios(results).items()},
        "setup": {
            "model": "gpt2, shrunken (backends.run --tiny)" if args.smoke else "gpt2 (124M)",
            "ranks": 2,
            "backend": "gloo",
            "precision": "fp32",
            "micro_batch": args.micro,
            "seq_len": args.seq,
            "steps": args.steps,
        },
    }
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        for name, value in document["ratios"].items():
            print(f"{name}: ours/deepspeed step time {value:.2f}, peak RSS {document['memory_ratios'][name]:.2f}")
    return 0


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    exit_worker(main())
