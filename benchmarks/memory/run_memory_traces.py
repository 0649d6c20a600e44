"""Run the memory traces of benchmarks/memory/trace_configs.py and write their results as JSON.

    python -m benchmarks.memory.run_memory_traces [--only LABEL ...] [--fast] [--jobs N]
                                                  [--out benchmarks/results/memory_traces.json]
    python -m benchmarks.memory.run_memory_traces --smoke   # one tiny trace, into a temporary file

Each config runs in its own subprocess (this script with --worker), so the fake process
group, FSDP state and Python memory of one trace cannot leak into the next; a trace that
exceeds --timeout is killed and reported as failed. Results are merged into --out by
label (results of other labels already in the file are kept) and written atomically.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.memory.trace_configs import by_label  # noqa: E402
from planner.files import write_json_atomic  # noqa: E402

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "memory_traces.json"
SMOKE_LABEL = "tiny-gpt2-fp32-adamw"  # the smallest of the fast subset
GIB = 2**30


def _worker(label: str, result_file: Path) -> None:
    """Run one trace in this process and write its TraceResult as JSON."""
    import warnings

    from benchmarks.memory.memory_trace import run_trace

    # FSDP2 warns that HF layers return views; harmless here and noisy in logs.
    warnings.filterwarnings("ignore", message=".*returned a view tensor.*")
    result = run_trace(by_label()[label])
    result_file.write_text(result.model_dump_json(), encoding="utf-8")


def _run_one(label: str, timeout: float) -> tuple[str, dict | None, str]:
    """Run one trace in a subprocess; return (label, result dict or None, error text)."""
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "benchmarks.memory.run_memory_traces", "--worker", label]
        cmd += ["--result-file", str(result_file)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)
        except subprocess.TimeoutExpired:
            return label, None, f"timed out after {timeout:.0f} s"
        if proc.returncode != 0 or not result_file.is_file():
            tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
            return label, None, f"exit code {proc.returncode}: {tail}"
        return label, json.loads(result_file.read_text(encoding="utf-8")), ""


def _row(result: dict) -> list[str]:
    at_peak = result["normalized_at_peak"]

    def gib(value: int) -> str:
        return f"{value / GIB:.3f}"

    return [
        result["label"],
        f"{result['param_count'] / 1e6:.1f}M",
        gib(result["peak_bytes"]),
        result["peak_phase"],
        *(gib(at_peak[c]) for c in ("Parameter", "Gradient", "Optstate", "Activation", "Temp")),
        result["attention_kernel"],
        f"{result['wall_seconds']:.1f}",
    ]


HEADER = ["label", "params", "peak GiB", "phase", "param", "grad", "opt", "act", "temp", "attention", "s"]


def _print_row(cells: list[str]) -> None:
    widths = [44, 8, 9, 9, 7, 7, 7, 7, 7, 21, 6]
    print("  ".join(c.ljust(w) for c, w in zip(cells, widths)), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="LABEL", help="run only these labels")
    parser.add_argument("--fast", action="store_true", help="run only the configs marked fast")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--jobs", type=int, default=2, help="traces run in parallel (default 2)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per trace (default 300)")
    parser.add_argument("--smoke", action="store_true", help=f"trace {SMOKE_LABEL} only, into a temporary file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        _worker(args.worker, args.result_file)
        return 0

    configs = by_label()
    if args.smoke:  # the worker subprocess, the table and the merged document, none of it kept
        if args.only or args.fast:
            parser.error("--smoke traces one label of its own; drop --only and --fast")
        with tempfile.TemporaryDirectory() as scratch:
            return trace_labels([SMOKE_LABEL], Path(scratch) / DEFAULT_OUT.name, args.jobs, args.timeout)
    if args.only:
        unknown = [label for label in args.only if label not in configs]
        if unknown:
            parser.error(f"unknown labels: {unknown}")
        labels = list(args.only)
    else:
        labels = [label for label, c in configs.items() if c.fast or not args.fast]
    return trace_labels(labels, args.out, args.jobs, args.timeout)


def trace_labels(labels: list[str], out: Path, jobs: int, timeout: float) -> int:
    """Trace `labels` (each in its own process), print a row each and merge the results into `out`."""
    configs = by_label()
    started = time.perf_counter()
    results: dict[str, dict] = {}
    failures: dict[str, str] = {}
    _print_row(HEADER)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(_run_one, label, timeout) for label in labels]
        for future in as_completed(futures):
            label, result, error = future.result()
            if result is None:
                failures[label] = error
                print(f"{label}: FAILED {error}", flush=True)
            else:
                results[label] = result
                _print_row(_row(result))
    elapsed = time.perf_counter() - started

    # Merge: keep earlier results of labels not re-run, in trace_configs order.
    previous: dict[str, dict] = {}
    if out.is_file():
        previous = {r["label"]: r for r in json.loads(out.read_text(encoding="utf-8")).get("results", [])}
    merged = {**previous, **results}
    for label in results:
        failures.pop(label, None)
    document = {
        "description": "Per-rank memory of one steady-state training step, traced with FakeTensorMode + "
        "torch.distributed._tools MemTracker/FSDPMemTracker (benchmarks/memory/memory_trace.py).",
        "last_run_wall_seconds": round(elapsed, 1),
        "last_run_labels": labels,
        "results": [merged[label] for label in configs if label in merged],
        "failures": [{"label": label, "error": error} for label, error in failures.items()],
    }
    write_json_atomic(out, document, indent=1)
    print(f"{len(results)} traced, {len(failures)} failed in {elapsed:.1f} s -> {out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
