"""Measure one matrix config with the project's one runner: `python -m backends.run --plan DIR`.

The config becomes a Plan, the emitters write its run folder, torchrun runs
it with the adapter the strategy names (ddp, fsdp, deepspeed, engine) on
synthetic tokens, and the per-step metrics it writes (metrics.jsonl, rank 0)
plus its summary (every rank's peak memory) become the result. Nothing here
trains or imports the engine: the runner is a separate process.
With --tiny, backends.run trains at most TINY_SEQ_LEN tokens per sequence, so
tiny matrices meant for this runner use that sequence length.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from benchmarks.harness.jobs import MeasureJob, MeasureResult
from benchmarks.harness.processes import LaunchOutcome, run_torchrun_command
from planner.errors import UserInputError

RUNNER_NAME = "backends.run"


def available() -> bool:
    from importlib.util import find_spec

    return find_spec("backends.run") is not None and find_spec("planner.emit") is not None


def _plan_for(job: MeasureJob, nproc: int):
    from planner.hardware.cluster import make_cluster
    from planner.memory.estimate import estimate_memory
    from planner.models.resolve import resolve_model
    from planner.plan import Plan

    spec = resolve_model(job.model)  # the full catalog model: backends.run shrinks it itself with --tiny
    cluster = make_cluster(job.gpu, gpus_per_node=nproc)
    memory = estimate_memory(
        spec,
        job.config,
        world_size=nproc,
        gpus_per_node=nproc,
        gpu_capacity_bytes=cluster.gpu.memory_bytes,
        cpu_capacity_per_node_bytes=cluster.cpu_ram_per_node_bytes,
    )
    return Plan(model=spec, cluster=cluster, config=job.config, memory=memory)


def backends_run_launch(jobs: list[MeasureJob], nproc: int, timeout_s: float) -> LaunchOutcome:
    """One torchrun job per config (jobs holds exactly one)."""
    from planner.rundir.write import emit_run_folder

    (job,) = jobs
    with tempfile.TemporaryDirectory(prefix="hs-bench-") as scratch:
        run_dir = Path(scratch) / "run"
        try:
            emit_run_folder(_plan_for(job, nproc), run_dir)
        except UserInputError as error:
            return LaunchOutcome(
                returncode=2,
                results={
                    job.key: MeasureResult(key=job.key, world_size=nproc, error=f"cannot emit its run folder: {error}")
                },
            )
        metrics = run_dir / "metrics.jsonl"
        command = [
            "-m",
            "backends.run",
            "--plan",
            str(run_dir),
            "--steps",
            str(job.warmup + job.steps),
            "--save-every",
            "0",
            "--metrics",
            str(metrics),
            "--no-record",  # the harness records the measurement itself (runner.run_matrix)
            *(["--tiny"] if job.tiny else []),
        ]
        returncode, stderr = run_torchrun_command(command, nproc, timeout_s)
        steps = [row for row in _rows(metrics) if row.get("kind") == "train"]
        summary = _rows(run_dir / "run_summary.json", whole=True)
    results = {}
    if returncode == 0 and len(steps) > job.warmup and summary:
        measured = steps[job.warmup :]
        results[job.key] = MeasureResult(
            key=job.key,
            world_size=nproc,
            step_times_s=[step["step_s"] for step in measured],
            peak_memory_per_rank_bytes=[int(peak) for peak in summary[0]["peak_memory_per_rank_bytes"]],
            memory_kind=summary[0]["memory_kind"],
        )
    elif returncode == 0:
        print(f"backends.run wrote {len(steps)} steps for {job.key}", file=sys.stderr)
    return LaunchOutcome(returncode=returncode, stderr_tail=stderr[-4000:], results=results)


def _rows(path: Path, *, whole: bool = False) -> list[dict]:
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8")
    return [json.loads(text)] if whole else [json.loads(line) for line in text.splitlines() if line.strip()]
