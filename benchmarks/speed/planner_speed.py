"""How fast the strategy search is: candidates per second, its cost by cluster size, and the CLI's wall time.

    .venv/bin/python -m benchmarks.speed.planner_speed [--repeats 5] [--markdown] [--out benchmarks/results/planner_speed.json]
    .venv/bin/python -m benchmarks.speed.planner_speed --smoke   # the smallest search and the CLI, once each

Each search runs once to warm caches, then `--repeats` times; the best time is
reported (the machine is shared; the minimum is the least disturbed run). A
"candidate" is one (layout, precision, activation checkpointing, micro-batch)
whose fate the search decided: by an estimator call, or exactly by
monotonicity/dominance (see planner/search/candidates.py). The counts of
estimator calls are reported beside it. The scaling series searches one model
on 8 to 16,384 GPUs: the search's cost should not grow with the cluster (the
throughput objective searches the one cluster; cost and time-to-train also
search each power-of-two slice of it, so their work grows with log2 of the
nodes). `plan` and `--help` are timed as fresh processes, the way a user runs
them, and checked not to import torch/transformers/deepspeed. On a busy
machine compare CPU time: wall time then measures the other jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from planner.files import write_json_atomic  # noqa: E402
from planner.hardware.cluster import make_cluster  # noqa: E402
from planner.models.resolve import resolve_model  # noqa: E402
from planner.search import Objective, PlanRequest, search_plans  # noqa: E402

# (model, GPU, GPUs per node, nodes, global batch, seq len, objective)
SCENARIOS = [
    ("llama-3-8b", "H100-80GB", 8, 32, 4608, 8192, "time-to-train"),
    ("llama-2-7b", "A100-80GB", 8, 64, 4096, 2048, "cost"),
    ("llama-3-70b", "H100-80GB", 8, 128, 8192, 4096, "cost"),
    ("llama-2-7b", "H100-80GB", 8, 4, 1024, 4096, "throughput"),
    ("llama-3.1-405b", "H100-80GB", 8, 128, 2048, 8192, "throughput"),
    ("gpt2-xl", "V100-32GB", 8, 1, None, 1024, "throughput"),
]
SMOKE_SCENARIO = SCENARIOS[-1]  # the fewest candidates
# One model from one node to 2,048 (GPUs per node 8), default global batch, seq 4096.
SCALING_MODEL, SCALING_GPU, SCALING_SEQ = "llama-3-8b", "H100-80GB", 4096
SCALING_GPUS = (8, 64, 512, 4096, 16384)
SCALING_OBJECTIVES = ("throughput", "cost")
CLI_ARGS = [
    "plan",
    "--model",
    "llama-2-7b",
    "--gpu",
    "H100-80GB",
    "--gpus-per-node",
    "8",
    "--nodes",
    "4",
    "--global-batch",
    "1024",
    "--seq-len",
    "4096",
]
CLI_PROBE = """
import sys, time
started = time.perf_counter()
from hardware_selector import main
code = main({argv!r})
sys.stdout.flush()
heavy = [name for name in ("torch", "transformers", "deepspeed", "accelerate") if name in sys.modules]
print(json.dumps({{"code": code, "heavy": heavy}}), file=sys.stderr)
""".replace("import sys, time", "import json, sys, time")


def time_search(scenario: tuple, repeats: int) -> dict:
    model, gpu, per_node, nodes, global_batch, seq_len, objective = scenario
    spec = resolve_model(model)
    cluster = make_cluster(gpu, per_node, nodes)
    request = PlanRequest(global_batch=global_batch, seq_len=seq_len, objective=Objective(objective))
    search_plans(spec, cluster, request)
    times, cpu_times = [], []
    for _ in range(repeats):
        started, cpu_started = time.perf_counter(), time.process_time()
        result = search_plans(spec, cluster, request)
        times.append(time.perf_counter() - started)
        cpu_times.append(time.process_time() - cpu_started)
    stats = result.stats
    best = min(times)
    return {
        "scenario": f"{model}, {cluster.world_size} x {gpu}, batch {global_batch or 'default'}, seq {seq_len}, {objective}",
        "gpus": cluster.world_size,
        "objective": objective,
        "candidates": stats.considered,
        "memory_calls": stats.memory_evaluations,
        "throughput_calls": stats.throughput_evaluations,
        "best_ms": best * 1000,
        "median_ms": statistics.median(times) * 1000,
        "cpu_ms": min(cpu_times) * 1000,
        "candidates_per_s": stats.considered / best,
        "candidates_per_cpu_s": stats.considered / min(cpu_times),
    }


def scaling_scenarios() -> list[tuple]:
    return [
        (SCALING_MODEL, SCALING_GPU, 8, gpus // 8, None, SCALING_SEQ, objective)
        for objective in SCALING_OBJECTIVES
        for gpus in SCALING_GPUS
    ]


def time_cli(args: list[str], repeats: int) -> dict:
    """`hardware-selector ARGS` as a fresh process: best and median wall, best CPU, heavy modules it imported.

    With compiled bytecode, as an installed package runs: an untimed first run writes it to a temporary
    PYTHONPYCACHEPREFIX (so nothing lands in the checkout), even where PYTHONDONTWRITEBYTECODE is set, which
    would otherwise compile every module from source on every run."""
    walls, cpus, heavy = [], [], set()
    with tempfile.TemporaryDirectory(prefix="hs-pycache-") as pycache:
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = pycache
        for attempt in range(repeats + 1):
            started = time.perf_counter()
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            completed = subprocess.run(
                [sys.executable, "-c", CLI_PROBE.format(argv=args)],
                cwd=REPO_ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            report = json.loads(completed.stderr.strip().splitlines()[-1])
            if report["code"] != 0:
                raise SystemExit(f"hardware-selector {' '.join(args)} failed: {completed.stderr}")
            heavy.update(report["heavy"])
            if attempt:  # the first run compiled the bytecode
                walls.append(wall)
                cpus.append(after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime)
    return {
        "command": "hardware-selector " + " ".join(args),
        "best_s": min(walls),
        "median_s": statistics.median(walls),
        "cpu_s": min(cpus),
        "heavy_imports": sorted(heavy),
    }


def _cli_line(cli: dict) -> str:
    return (
        f"`{cli['command']}`, fresh process: wall best {cli['best_s']:.2f} s, median {cli['median_s']:.2f} s, "
        f"CPU {cli['cpu_s']:.2f} s; heavy modules imported: {', '.join(cli['heavy_imports']) or 'none'}."
    )


def markdown(searches: list[dict], scaling: list[dict], clis: list[dict]) -> str:
    lines = [
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()} "
        f"({platform.python_implementation()} {platform.python_version()}), 2 cores shared with other jobs "
        f"(load average {os.getloadavg()[0]:.1f}); best wall and CPU time of the repeats.",
        "",
        "| search | candidates | memory calls | throughput calls | wall ms (best) | wall ms (median) | CPU ms | candidates per CPU-second |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in searches:
        lines.append(
            f"| {row['scenario']} | {row['candidates']:,} | {row['memory_calls']:,} | {row['throughput_calls']:,} | "
            f"{row['best_ms']:.0f} | {row['median_ms']:.0f} | {row['cpu_ms']:.0f} | {row['candidates_per_cpu_s']:,.0f} |"
        )
    if scaling:
        lines += [
            "",
            f"Search cost by cluster size: {SCALING_MODEL} on {SCALING_GPU}, 8 per node, default global batch, "
            f"seq {SCALING_SEQ}.",
            "",
            "| objective | GPUs | candidates | memory calls | throughput calls | CPU ms | candidates per CPU-second |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for row in scaling:
            lines.append(
                f"| {row['objective']} | {row['gpus']:,} | {row['candidates']:,} | {row['memory_calls']:,} | "
                f"{row['throughput_calls']:,} | {row['cpu_ms']:.0f} | {row['candidates_per_cpu_s']:,.0f} |"
            )
    lines.append("")
    lines += [_cli_line(cli) for cli in clis]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--markdown", action="store_true", help="Print the table docs/performance.md records.")
    parser.add_argument("--smoke", action="store_true", help="the smallest search (gpt2-xl, 8 GPUs) and the CLI, once")
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "benchmarks/results/planner_speed.json", help="(not with --smoke)"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    repeats = 1 if args.smoke else args.repeats
    scenarios = [SMOKE_SCENARIO] if args.smoke else SCENARIOS
    searches = [time_search(scenario, repeats) for scenario in scenarios]
    scaling = [] if args.smoke else [time_search(scenario, repeats) for scenario in scaling_scenarios()]
    clis = [time_cli([*CLI_ARGS, "--json"], repeats), time_cli(["--help"], repeats)]
    document = {
        "measured_at": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        "load_average": os.getloadavg()[0],
        "command": " ".join(["python -m benchmarks.speed.planner_speed", *(sys.argv[1:] if argv is None else argv)]),
        "searches": searches,
        "scaling": scaling,
        "cli": clis[0],
        "help": clis[1],
    }
    if not args.smoke:  # a smoke run leaves the recorded results as they are
        write_json_atomic(args.out, document)
        print(f"wrote {args.out}", file=sys.stderr)
    print(markdown(searches, scaling, clis) if args.markdown else json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
