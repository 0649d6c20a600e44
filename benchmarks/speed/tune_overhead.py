"""Benchmark: what a tune trial costs beside its measured window (docs/running.md, "Tune").

    python -m benchmarks.speed.tune_overhead [--candidates 3] [--out benchmarks/results/tune_overhead.json]
    python -m benchmarks.speed.tune_overhead --smoke   # one trial of a tiny GPT-2, nothing kept

Runs a tune (benchmarks/harness/tune.py) of gpt2, shrunken (--tiny), on 2 CPU ranks over gloo and reports, per
trial, its wall time, its measured window (warm-up and timed steps at the measured step time) and the
difference: the launch overhead every trial pays today (torchrun, each rank's imports, the model's build, the
process group). A benchmark, not a test: it measures and writes JSON; nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from planner.files import write_json_atomic

os.environ.setdefault("OMP_NUM_THREADS", "1")


def measure(candidates: int, budget_min: float, db: Path) -> dict:
    from benchmarks.harness.tune import WARMUP_STEPS, run_tune
    from benchmarks_db.store import BenchmarkStore
    from planner.hardware.cluster import make_cluster
    from planner.models.resolve import resolve_model
    from planner.search import PlanRequest, search_plans

    spec, cluster = resolve_model("gpt2"), make_cluster("cpu", gpus_per_node=2)
    plans = search_plans(spec, cluster, PlanRequest(seq_len=32, global_batch=4, top_k=5)).candidates[:candidates]
    outcome = run_tune(spec, cluster, plans, tiny=True, budget_s=budget_min * 60, store=BenchmarkStore(db))
    rows = []
    for trial in outcome.trials:
        steps = outcome.timed_steps + WARMUP_STEPS
        window = steps * trial.measured_step_s if trial.measured_step_s else None
        overhead = trial.launch_overhead_s
        rows.append(
            {
                "trial": trial.label,
                "status": trial.status,
                "measured_window_s": window,
                "launch_overhead_s": overhead,
                "overhead_share": overhead / (overhead + window) if overhead is not None and window else None,
            }
        )
    return {
        "model": "gpt2 (shrunken, --tiny), 2 CPU ranks over gloo",
        "timed_steps": outcome.timed_steps,
        "trials": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.speed.tune_overhead", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--budget", type=float, default=3.0, help="minutes for the whole tune")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/tune_overhead.json"))
    parser.add_argument("--smoke", action="store_true", help="one trial in a half-minute budget; print the JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hs-tune-bench-") as scratch:
        candidates, budget = (1, 0.5) if args.smoke else (args.candidates, args.budget)
        document = measure(candidates, budget, Path(scratch) / "benchmarks.duckdb")
    given = sys.argv[1:] if argv is None else argv
    document["command"] = " ".join(["python -m benchmarks.speed.tune_overhead", *given])
    if args.smoke:
        print(json.dumps(document, indent=2))
    else:
        write_json_atomic(args.out, document)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
