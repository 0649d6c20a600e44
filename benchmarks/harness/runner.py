"""Run a benchmark matrix on this machine and record every result as it finishes (docs/benchmarks.md).

The configs of one world size run in one torchrun launch of the one runner (launch.py, trials.py): each
rank's imports and process group are paid once, not once per config. Each config has its own timeout,
counted from the end of the config before it in the launch. An OOM, crash or timeout is recorded as that
config's result and the configs after it are launched again. Results are stored here, on the calling thread
(DuckDB's one writer), as each launch ends, and when the matrix is interrupted those that ended before it;
configs already in the database are skipped, and a launch's finished trials left in the scratch folder are
read back, so an interrupted matrix resumes where it stopped.
"""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, Field

from benchmarks.harness import launch
from benchmarks.harness.jobs import MeasureJob, MeasureResult
from benchmarks.harness.matrix import BenchmarkMatrix, MatrixEntry
from benchmarks.harness.processes import LaunchOutcome
from benchmarks.harness.trials import EXCEPTION_LINE, ONE_LINE_ERROR, TrialRun, scratch_folder, scratch_held
from benchmarks_db.environment import RunEnvironment
from benchmarks_db.record import RunRecord, RunStatus, measured_rates
from benchmarks_db.store import BenchmarkStore

OOM_MARKERS = ("out of memory", "outofmemoryerror", "cannot allocate memory", "memorylimitexceeded")


class RunSummary(BaseModel):
    runner: str = launch.RUNNER_NAME
    recorded: dict[str, int] = Field(default_factory=dict)  # status -> count
    skipped_done: int = 0
    record_ids: list[str] = Field(default_factory=list)
    launches: int = 0  # torchrun launches started: one per world size, and one more after each failure


class Launcher(Protocol):
    """Runs jobs of one world size (launch.backends_run_launch); a stand-in may ignore the keywords and only
    return each job's run."""

    def __call__(
        self,
        jobs: list[MeasureJob],
        nproc: int,
        timeout_s: float,
        *,
        scratch: Path,
        on_ended: Callable[[str], None],
        on_run: Callable[[TrialRun], None],
    ) -> list[TrialRun]: ...


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
            # None above the GPU's peak: the same rule as a `train` run's record (benchmarks_db/record.py).
            measured |= measured_rates(predicted.tflops_per_gpu, predicted.mfu, predicted.step_time_s, median)
    if result is not None and result.peak_memory_per_rank_bytes:
        measured["peak_memory_per_rank_bytes"] = result.peak_memory_per_rank_bytes
    predicted = entry.predicted
    # A --tiny trial of a GPU plan on a machine without CUDA runs on CPU processes (the runner's memory kind says
    # so): its record keeps the planned GPU's name, which tune reads its trials back by, and says where it ran.
    on_cpu = entry.gpu == "cpu" or (matrix.tiny and result is not None and result.memory_kind == "host peak RSS")
    return RunRecord(
        **environment.model_dump(),
        gpu_name=entry.gpu,
        gpu_count=entry.world_size,
        nodes=entry.nodes,
        interconnect="host-memory" if on_cpu else "local",
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
        # The formula's step, as every record's (tune's plans are the formula's; a calibrated one keeps it aside).
        predicted_step_time_s=predicted.formula_step_s if predicted else None,
        predicted_tokens_per_s=predicted.tokens_per_s * predicted.step_time_s / predicted.formula_step_s
        if predicted
        else None,
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
    """Measure the matrix entries not yet recorded, one launch per world size; on_start gets how many will run,
    on_progress each entry as its trial ends (from the launch's watcher thread while the launch runs)."""
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
    entries = {entry.key: entry for entry in pending}
    statuses: dict[str, RunStatus] = {}
    told: set[str] = set()

    def record(run: TrialRun) -> None:  # on this thread: DuckDB has one writer
        if run.key in statuses:
            return
        record = record_outcome(entries[run.key], matrix, environment, run.outcome, timeout_s, runner_name)
        store.add(record)
        statuses[run.key] = record.status
        summary.recorded[record.status.value] = summary.recorded.get(record.status.value, 0) + 1
        summary.record_ids.append(record.id)

    def ended(key: str) -> None:
        if key not in told:
            told.add(key)
            if on_progress:  # a trial that ended in its launch measured its steps; a failure is recorded first
                on_progress(entries[key], statuses.get(key, RunStatus.OK))

    # The steps are in the identity: a resumed matrix reads back only trials that timed what it asks.
    identity = [f"steps={steps} warmup={warmup}", *(entry.key for entry in matrix.entries)]
    scratch = scratch_folder("matrix", Path(store.path), identity)
    with scratch_held(scratch):  # one process runs these entries at a time (a second matrix: one line)
        for group in _by_launch(pending):
            jobs = [_job(entry, matrix, steps, warmup) for entry in group]
            runs = launcher(jobs, group[0].world_size, timeout_s, scratch=scratch, on_ended=ended, on_run=record)
            for run in runs:  # those a stand-in launcher did not hand to on_run or tell on_ended of
                record(run)
                ended(run.key)
            summary.launches += max((run.launches for run in runs), default=0)
        shutil.rmtree(scratch, ignore_errors=True)  # every entry is in the database now
    return summary


def _by_launch(entries: list[MatrixEntry]) -> list[list[MatrixEntry]]:
    """The entries that can share a launch (one world size on as many nodes), in the matrix's order."""
    groups: dict[tuple[int, int], list[MatrixEntry]] = {}
    for entry in entries:
        groups.setdefault((entry.world_size, entry.nodes), []).append(entry)
    return list(groups.values())


def _job(entry: MatrixEntry, matrix: BenchmarkMatrix, steps: int, warmup: int) -> MeasureJob:
    return MeasureJob(
        key=entry.key,
        model=matrix.model,
        tiny=matrix.tiny,
        gpu=entry.gpu,
        config=entry.config,
        steps=steps,
        warmup=warmup,
    )
