"""Run a benchmark matrix on this machine and record every result as it finishes.

Each config runs in its own torchrun job of the one runner (backends.run,
through launch.py) under a timeout. An OOM, crash or timeout is
recorded as that config's result and the matrix goes on. Configs already in
the database are skipped, so an interrupted matrix resumes where it stopped.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable

from pydantic import BaseModel, Field

from benchmarks.harness import launch
from benchmarks.harness.jobs import MeasureJob, MeasureResult
from benchmarks.harness.matrix import BenchmarkMatrix, MatrixEntry
from benchmarks.harness.processes import LaunchOutcome
from benchmarks_db.environment import RunEnvironment
from benchmarks_db.record import RunRecord, RunStatus
from benchmarks_db.store import BenchmarkStore

EXCEPTION_LINE = re.compile(r"^(\[rank\d+\]:\s*)?([A-Za-z_][\w.]*(Error|Exception)): ")
ONE_LINE_ERROR = re.compile(r"^(\[rank\d+\]:\s*)?error: ")
OOM_MARKERS = ("out of memory", "outofmemoryerror", "cannot allocate memory")


class RunSummary(BaseModel):
    runner: str = launch.RUNNER_NAME
    recorded: dict[str, int] = Field(default_factory=dict)  # status -> count
    skipped_done: int = 0
    record_ids: list[str] = Field(default_factory=list)


Launcher = Callable[[list[MeasureJob], int, float], LaunchOutcome]


def classify_failure(outcome: LaunchOutcome, timeout_s: float) -> tuple[RunStatus, str]:
    if outcome.returncode is None:
        return RunStatus.TIMEOUT, f"killed after the {timeout_s:g} s timeout"
    text = outcome.stderr_tail.lower()
    lines = [line.strip() for line in outcome.stderr_tail.splitlines() if line.strip()]
    # The rank's one-line error ("error: ...", the runner's UserInputError) or exception ("ValueError: ..."),
    # not torchrun's summary that follows it.
    raised = [line for line in lines if ONE_LINE_ERROR.search(line)] or [
        line for line in lines if EXCEPTION_LINE.search(line)
    ]
    detail = (
        raised[-1]
        if raised
        else next((line for line in reversed(lines) if "error" in line.lower()), lines[-1] if lines else "")
    )
    if any(marker in text for marker in OOM_MARKERS):
        return RunStatus.OOM, detail.strip() or "out of memory"
    if "signal 9" in text or "sigkill" in text or outcome.returncode in (-9, 137):
        return RunStatus.OOM, "a rank was killed by SIGKILL (the kernel's OOM killer, most likely)"
    return RunStatus.ERROR, f"exit code {outcome.returncode}: {detail.strip()}"[:2000]


def build_record(
    entry: MatrixEntry,
    matrix: BenchmarkMatrix,
    environment: RunEnvironment,
    status: RunStatus,
    result: MeasureResult | None,
    error: str | None,
    runner: str = launch.RUNNER_NAME,
) -> RunRecord:
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
        if predicted is not None and not matrix.tiny:
            # Same model FLOPs as the prediction counts, over the measured time (a --tiny run trains a shrunken
            # model, so the full model's FLOPs over its time would be no rate at all).
            measured["tflops_per_gpu"] = predicted.tflops_per_gpu * predicted.step_time_s / median
            measured["mfu"] = predicted.mfu * predicted.step_time_s / median
    if result is not None and result.peak_memory_per_rank_bytes:
        measured["peak_memory_per_rank_bytes"] = result.peak_memory_per_rank_bytes
    predicted = entry.predicted
    return RunRecord(
        **environment.model_dump(),
        gpu_name=entry.gpu,
        gpu_count=entry.world_size,
        nodes=entry.nodes,
        interconnect="host-memory" if entry.gpu == "cpu" else "local",
        model_name=matrix.model,
        model_spec_hash=matrix.model_spec_hash,
        tiny=matrix.tiny,
        strategy=entry.strategy,
        config_json=config.model_dump_json(),
        micro_batch=config.micro_batch,
        grad_accum=config.grad_accum,
        global_batch=global_batch,
        seq_len=config.seq_len,
        precision=config.precision.value,
        predicted_step_time_s=predicted.step_time_s if predicted else None,
        predicted_tokens_per_s=predicted.tokens_per_s if predicted else None,
        predicted_peak_memory_bytes=entry.predicted_memory_bytes,
        prediction_json=predicted.model_dump_json() if predicted else None,
        status=status,
        error=error,
        matrix_key=entry.key,
        runner=runner,
        **measured,
    )


def record_outcome(
    entry: MatrixEntry,
    matrix: BenchmarkMatrix,
    environment: RunEnvironment,
    outcome: LaunchOutcome,
    timeout_s: float,
    runner: str = launch.RUNNER_NAME,
) -> RunRecord:
    """The entry's record: its measurement, or its failure as the launch's output tells it."""
    result = outcome.results.get(entry.key)
    if result is not None and result.error is None:
        status, error = RunStatus.OK, None
    elif result is not None:
        status, error = RunStatus.ERROR, result.error
    else:
        status, error = classify_failure(outcome, timeout_s)
    return build_record(entry, matrix, environment, status, result, error, runner)


def run_matrix(
    matrix: BenchmarkMatrix,
    store: BenchmarkStore,
    environment: RunEnvironment,
    *,
    steps: int = 8,
    warmup: int = 2,
    timeout_s: float = 600.0,
    retry_failed: bool = False,
    launcher: Launcher | None = None,
    on_progress: Callable[[MatrixEntry, RunStatus], None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> RunSummary:
    """Measure the matrix entries not yet recorded; on_start gets how many will run."""
    runner_name = launch.RUNNER_NAME
    launcher = launcher or launch.backends_run_launch
    summary = RunSummary(runner=runner_name)
    done = store.done_matrix_keys(retry_failed=retry_failed)
    pending: list[MatrixEntry] = []
    for entry in matrix.entries:
        if entry.key in done:
            summary.skipped_done += 1
        else:
            pending.append(entry)
    if on_start:
        on_start(len(pending))
    for entry in pending:
        job = MeasureJob(
            key=entry.key,
            model=matrix.model,
            tiny=matrix.tiny,
            gpu=entry.gpu,
            config=entry.config,
            steps=steps,
            warmup=warmup,
        )
        outcome = launcher([job], entry.world_size, timeout_s)
        record = record_outcome(entry, matrix, environment, outcome, timeout_s, runner_name)
        status = record.status
        store.add(record)  # as each result arrives: an interrupted matrix keeps what it measured
        summary.recorded[status.value] = summary.recorded.get(status.value, 0) + 1
        summary.record_ids.append(record.id)
        if on_progress:
            on_progress(entry, status)
    return summary
