"""Run a benchmark matrix on this machine and record every result as it finishes.

Each config runs in its own torchrun job (or, with shared_launch, all configs
of one GPU count share a job: faster start-up, less isolation) under a
timeout. An OOM, crash or timeout is recorded as that config's result and the
matrix goes on. Configs already in the database are skipped, so an
interrupted matrix resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

from pydantic import BaseModel, Field

from .environment import RunEnvironment
from .matrix import BenchmarkMatrix, MatrixEntry
from .measure import MeasureJob, MeasureResult, unsupported_reason
from .record import RunRecord, RunStatus
from .store import BenchmarkStore

REPO_ROOT = Path(__file__).resolve().parent.parent
RUNNER_NAME = "benchmarks_db.measure"
OOM_MARKERS = ("out of memory", "outofmemoryerror", "cannot allocate memory")


class LaunchOutcome(BaseModel):
    """What one torchrun job left behind."""

    returncode: Optional[int]  # None: killed at the timeout
    stderr_tail: str = ""
    results: dict[str, MeasureResult] = Field(default_factory=dict)


class RunSummary(BaseModel):
    recorded: dict[str, int] = Field(default_factory=dict)  # status -> count
    skipped_done: int = 0
    skipped_unsupported: list[str] = Field(default_factory=list)
    record_ids: list[str] = Field(default_factory=list)


Launcher = Callable[[list[MeasureJob], int, float], LaunchOutcome]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun_launch(jobs: list[MeasureJob], nproc: int, timeout_s: float) -> LaunchOutcome:
    """One torchrun job measuring `jobs` on `nproc` local ranks."""
    with tempfile.TemporaryDirectory(prefix="hs-bench-") as scratch:
        jobs_file = Path(scratch) / "jobs.json"
        jobs_file.write_text(json.dumps({"jobs": [job.model_dump(mode="json") for job in jobs]}))
        results_dir = Path(scratch) / "results"
        results_dir.mkdir()
        env = dict(os.environ)
        # One thread per rank unless told otherwise: the `cpu` pseudo-GPU is one core, and
        # more threads than cores thrash (badly, on a shared machine).
        env.setdefault("OMP_NUM_THREADS", "1")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
                   f"--master-port={_free_port()}", "-m", RUNNER_NAME, str(jobs_file), str(results_dir)]
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            _, stderr = process.communicate(timeout=timeout_s)
            returncode: Optional[int] = process.returncode
        except subprocess.TimeoutExpired:
            kill_tree(process.pid)
            _, stderr = process.communicate()
            returncode = None
        results = {
            path.stem: MeasureResult.model_validate_json(path.read_text()) for path in results_dir.glob("*.json")
        }
    return LaunchOutcome(returncode=returncode, stderr_tail=stderr[-4000:], results=results)


def kill_tree(pid: int) -> None:
    """Kill torchrun and its ranks: the ranks run in sessions of their own, so a process-group kill misses them."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(processes, timeout=10)


def classify_failure(outcome: LaunchOutcome, timeout_s: float) -> tuple[RunStatus, str]:
    if outcome.returncode is None:
        return RunStatus.TIMEOUT, f"killed after the {timeout_s:g} s timeout"
    text = outcome.stderr_tail.lower()
    lines = [line for line in outcome.stderr_tail.splitlines() if line.strip()]
    detail = next((line for line in reversed(lines) if "error" in line.lower()), lines[-1] if lines else "")
    if any(marker in text for marker in OOM_MARKERS):
        return RunStatus.OOM, detail.strip() or "out of memory"
    if "signal 9" in text or "sigkill" in text or outcome.returncode in (-9, 137):
        return RunStatus.OOM, "a rank was killed by SIGKILL (the kernel's OOM killer, most likely)"
    return RunStatus.ERROR, f"exit code {outcome.returncode}: {detail.strip()}"[:2000]


def build_record(entry: MatrixEntry, matrix: BenchmarkMatrix, environment: RunEnvironment, status: RunStatus,
                 result: MeasureResult | None, error: str | None) -> RunRecord:
    config = entry.config
    global_batch = config.micro_batch * config.grad_accum * config.data_parallel_size(entry.world_size)
    measured: dict = {}
    if status is RunStatus.OK and result is not None:
        times = sorted(result.step_times_s)
        median = statistics.median(times)
        quartiles = statistics.quantiles(times, n=4) if len(times) >= 2 else [median, median, median]
        measured = {
            "step_time_median_s": median,
            "step_time_spread_s": quartiles[2] - quartiles[0],
            "steps_measured": len(times),
            "tokens_per_s": global_batch * config.seq_len / median,
        }
        predicted = entry.predicted
        if predicted is not None:
            # Same model FLOPs as the prediction counts, over the measured time.
            measured["tflops_per_gpu"] = predicted.tflops_per_gpu * predicted.step_time_s / median
            measured["mfu"] = predicted.mfu * predicted.step_time_s / median
    if result is not None and result.peak_memory_per_rank_bytes:
        measured["peak_memory_per_rank_bytes"] = result.peak_memory_per_rank_bytes
    predicted = entry.predicted
    return RunRecord(
        **environment.model_dump(),
        gpu_name=entry.gpu, gpu_count=entry.world_size, nodes=entry.nodes,
        interconnect="host-memory" if entry.gpu == "cpu" else "local",
        model_name=matrix.model, model_spec_hash=matrix.model_spec_hash, tiny=matrix.tiny,
        strategy=entry.strategy, config_json=config.model_dump_json(), micro_batch=config.micro_batch,
        grad_accum=config.grad_accum, global_batch=global_batch, seq_len=config.seq_len,
        precision=config.precision.value,
        predicted_step_time_s=predicted.step_time_s if predicted else None,
        predicted_tokens_per_s=predicted.tokens_per_s if predicted else None,
        predicted_peak_memory_bytes=entry.predicted_memory_bytes,
        prediction_json=predicted.model_dump_json() if predicted else None,
        status=status, error=error, matrix_key=entry.key, runner=RUNNER_NAME, **measured,
    )


def run_matrix(
    matrix: BenchmarkMatrix,
    store: BenchmarkStore,
    environment: RunEnvironment,
    *,
    steps: int = 8,
    warmup: int = 2,
    timeout_s: float = 600.0,
    shared_launch: bool = False,
    retry_failed: bool = False,
    launcher: Launcher = torchrun_launch,
    on_progress: Callable[[MatrixEntry, RunStatus], None] | None = None,
) -> RunSummary:
    summary = RunSummary()
    done = store.done_matrix_keys(retry_failed=retry_failed)
    pending: list[MatrixEntry] = []
    for entry in matrix.entries:
        reason = unsupported_reason(entry.config)
        if entry.key in done:
            summary.skipped_done += 1
        elif reason:
            summary.skipped_unsupported.append(f"{entry.label}: {reason}")
        else:
            pending.append(entry)
    groups = _launch_groups(pending, shared_launch)
    for group in groups:
        jobs = [MeasureJob(key=e.key, model=matrix.model, tiny=matrix.tiny, config=e.config, steps=steps,
                           warmup=warmup) for e in group]
        outcome = launcher(jobs, group[0].world_size, timeout_s * len(group))
        for entry in group:
            result = outcome.results.get(entry.key)
            if result is not None and result.error is None:
                status, error = RunStatus.OK, None
            elif result is not None:
                status, error = RunStatus.ERROR, result.error
            else:
                status, error = classify_failure(outcome, timeout_s * len(group))
            record = build_record(entry, matrix, environment, status, result, error)
            store.add(record)  # as each result arrives: an interrupted matrix keeps what it measured
            summary.recorded[status.value] = summary.recorded.get(status.value, 0) + 1
            summary.record_ids.append(record.id)
            if on_progress:
                on_progress(entry, status)
    return summary


def _launch_groups(entries: list[MatrixEntry], shared: bool) -> list[list[MatrixEntry]]:
    if not shared:
        return [[entry] for entry in entries]
    by_world: dict[int, list[MatrixEntry]] = {}
    for entry in entries:
        by_world.setdefault(entry.world_size, []).append(entry)
    return list(by_world.values())
