"""Benchmark (not a test): our ZeRO-1/2/3 against DeepSpeed ZeRO-1/2/3 and FSDP2 on the same work.

Every run trains the same GPT-2-small-shaped model (the catalog's gpt2
config, fp32, torch AdamW) on 2 CPU ranks (gloo) with the same batch, sequence
length and number of steps, through the same loop (backends.adapter /
backends.engine). It reports the median step time after warm-up and the
peak resident memory of the busiest rank, and the ratios ours / DeepSpeed per
stage (goal: <= 1.0 for both).

    python -m benchmarks.engine_vs_peers [--json] [--steps 4] [--seq 128] [--micro 2] [--only ours:1,deepspeed:1]

--only reruns some (engine, stage) pairs; ratios are printed for the stages
that have both ours and DeepSpeed among them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RUNS = [("deepspeed", 1), ("deepspeed", 2), ("deepspeed", 3), ("fsdp2", 3), ("ours", 1), ("ours", 2), ("ours", 3)]
WARMUP_STEPS = 1


def engine_settings(stage: int, micro: int, seq: int) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
        "zero_optimization": {"stage": stage},
        "gradient_clipping": 1.0,
        "hardware_selector": {"seq_len": seq},
    }


def worker(engine_name: str, stage: int, steps: int, micro: int, seq: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from backends.model_factory import build_causal_lm, catalog_config
    from backends.monitor import peak_rss_bytes
    from planner.contract.engine_config import load_engine_config

    dist.init_process_group("gloo")
    config = load_engine_config(engine_settings(stage, micro, seq))
    hf_config = catalog_config("gpt2")
    model = build_causal_lm(hf_config, seed=0)
    if engine_name == "ours":
        import backends

        trainer, _, _, _ = backends.initialize(model=model, config=config)
    elif engine_name == "deepspeed":
        from backends.deepspeed import DeepSpeedAdapter

        trainer = DeepSpeedAdapter(model, config)
    else:
        from backends.fsdp import FsdpAdapter

        trainer = FsdpAdapter(model, config)
    generator = torch.Generator().manual_seed(dist.get_rank())
    times = []
    for _ in range(WARMUP_STEPS + steps):
        batch = [torch.randint(0, hf_config["vocab_size"], (micro, seq), generator=generator)]
        dist.barrier()
        began = time.perf_counter()
        trainer.train_batch(batch)
        dist.barrier()
        times.append(time.perf_counter() - began)
    peak = torch.tensor([peak_rss_bytes()], dtype=torch.float64)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        Path(out).write_text(
            json.dumps(
                {
                    "engine": engine_name,
                    "stage": stage,
                    "step_time_s": statistics.median(times[WARMUP_STEPS:]),
                    "peak_rss_bytes": int(peak.item()),
                    "steps": steps,
                    "micro_batch": micro,
                    "seq_len": seq,
                }
            )
        )
    dist.destroy_process_group()


def launch(engine_name: str, stage: int, args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    out = scratch / f"{engine_name}_{stage}.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "benchmarks.engine_vs_peers",
        "--worker",
        engine_name,
        str(stage),
        "--steps",
        str(args.steps),
        "--micro",
        str(args.micro),
        "--seq",
        str(args.seq),
        "--out",
        str(out),
    ]
    completed = subprocess.run(
        command, env=env, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent
    )
    if completed.returncode:
        raise RuntimeError(f"{engine_name} stage {stage} failed:\n{completed.stderr[-4000:]}")
    return json.loads(out.read_text())


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


def selected_runs(only: str | None) -> list[tuple[str, int]]:
    """RUNS, or the ENGINE:STAGE pairs of `only` (comma-separated), in RUNS order."""
    if not only:
        return RUNS
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
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--micro", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--only", metavar="ENGINE:STAGE,...", help="run only these pairs, e.g. ours:1,deepspeed:1")
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "STAGE"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.steps, args.micro, args.seq, args.out)
        return 0
    runs = selected_runs(args.only)
    with tempfile.TemporaryDirectory() as scratch:
        results = []
        for engine_name, stage in runs:
            results.append(launch(engine_name, stage, args, Path(scratch)))
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
            "model": "gpt2 (124M)",
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
