"""Benchmark: what a tune trial costs beside its measured window (docs/running.md, "Tune").

    python -m benchmarks.speed.tune_overhead [--candidates 3] [--out benchmarks/results/tune_overhead.json]
    python -m benchmarks.speed.tune_overhead --smoke   # one trial of a tiny GPT-2 in one launch, 4 steps, nothing kept

Runs the same tune (benchmarks/harness/tune.py) of gpt2, shrunken (--tiny), on 2 CPU ranks over gloo twice:
as a tune runs, all K trials in one torchrun launch, and as tunes ran before, a launch per trial. It reports,
per trial, its measured window (warm-up and timed steps at the measured step time) and its overhead (its share
of its launch's start-up: torchrun, each rank's imports, the process group; and its own set-up: the model,
the optimizer, the data). A benchmark, not a test: it measures and writes JSON; nothing asserts.
--smoke tunes one candidate, so its one launch is also its launch per trial: it launches once and reports that
launch under both ways (a second launch of the same trial would only cost the start-up again).
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
# --smoke checks that the benchmark runs, not what it measures: a few timed steps, not the budget's 50.
SMOKE_TIMED_STEPS = 4


def measure(candidates: int, budget_min: float, scratch: Path, *, smoke: bool = False) -> dict:
    from benchmarks.harness.tune import MAX_TIMED_STEPS, WARMUP_STEPS, run_tune
    from benchmarks_db.store import BenchmarkStore
    from planner.hardware.cluster import make_cluster
    from planner.models.resolve import resolve_model
    from planner.search import PlanRequest, search_plans

    spec, cluster = resolve_model("gpt2"), make_cluster("cpu", gpus_per_node=2)
    plans = search_plans(spec, cluster, PlanRequest(seq_len=32, global_batch=4, top_k=5)).candidates[:candidates]

    def tune(batch: list, db: Path) -> list[dict]:
        outcome = run_tune(
            spec, cluster, batch, tiny=True, budget_s=budget_min * 60, store=BenchmarkStore(db),
            most_steps=SMOKE_TIMED_STEPS if smoke else MAX_TIMED_STEPS,
        )  # fmt: skip
        rows = []
        for trial in outcome.trials:
            steps = outcome.timed_steps + WARMUP_STEPS
            window = steps * trial.measured_step_s if trial.measured_step_s else None
            overhead = trial.launch_overhead_s
            share = overhead / (overhead + window) if overhead is not None and window else None
            rows.append({"trial": trial.label, "status": trial.status, "timed_steps": outcome.timed_steps,
                         "measured_window_s": window, "overhead_s": overhead, "overhead_share": share})  # fmt: skip
        return rows

    one_launch = tune(plans, scratch / "one-launch.duckdb")
    if smoke:  # one candidate, whose launch per trial is the launch just measured: a second would repeat it
        launch_each = one_launch
    else:
        launch_each = [
            row for index, plan in enumerate(plans) for row in tune([plan], scratch / f"each-{index}.duckdb")
        ]
    return {
        "model": "gpt2 (shrunken, --tiny), 2 CPU ranks over gloo",
        "one_launch": one_launch,
        "a_launch_per_trial": launch_each,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.speed.tune_overhead", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--budget", type=float, default=3.0, help="minutes for the whole tune")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/tune_overhead.json"))
    parser.add_argument("--smoke", action="store_true", help="one trial, one launch, 4 timed steps; print the JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hs-tune-bench-") as scratch:
        candidates, budget = (1, 0.5) if args.smoke else (args.candidates, args.budget)
        document = measure(candidates, budget, Path(scratch), smoke=args.smoke)
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
