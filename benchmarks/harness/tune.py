"""Tune: measure the search's top plans on this machine for minutes, and re-rank them by what was measured.

A tune (docs/running.md, "Tune") takes the best plan of each of the top K strategy families the search ranked
(planner/search: the candidates are distinct by family), as a benchmark matrix of K entries
(benchmarks/harness/matrix.py), and runs them in one torchrun launch of the one runner
(benchmarks/harness/trials.py, backends/runner/trials.py) on the run's own data or synthetic tokens:
warm-up steps left out of the timing, an OOM, crash, guard or timeout recorded as that trial's result and the
tune going on in a new launch, trials already in the database skipped, so a killed tune resumes where it
stopped. Every trial is a record beside its prediction, so later plans on this hardware are calibrated by it
(benchmarks_db/calibrate.py). The measured order puts the highest measured tokens/s first; `order_changes`
says why a trial moved.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel

from benchmarks.harness.matrix import BenchmarkMatrix, MatrixEntry, matrix_key
from benchmarks.harness.tune_links import assumed_link_GBps, assumed_link_source, dominant_collective, link_sentence
from benchmarks_db.record import RunRecord, spec_hash
from benchmarks_db.store import BenchmarkStore
from planner.calibration import strategy_family
from planner.errors import UserInputError
from planner.hardware.cluster import ClusterSpec
from planner.models.spec import ModelSpec
from planner.plan import Plan
from planner.rundir.run_options import RunOptions
from planner.rundir.trial import TrialRequest
from planner.search.strategy_layout import family_label

DEFAULT_TOP_K = 3
DEFAULT_BUDGET_MIN = 10.0
WARMUP_STEPS = 2
MIN_TIMED_STEPS = 2
MAX_TIMED_STEPS = 50
# What a tune costs beside its steps before one was measured here: the launch's start-up once (torchrun,
# every rank's imports of torch and transformers, about 6 s on this project's 2-core CI machine,
# docs/performance.md, and the process group), then each trial's set-up (its model, optimizer and data).
# Measured per trial and printed once the trials ran (benchmarks/speed/tune_overhead.py).
ASSUMED_LAUNCH_S = 15.0
ASSUMED_TRIAL_SETUP_S = 5.0
# A --tiny trial trains the shrunken model (backends/weights/model_factory.py TINY_SIZES: hidden 64, 4 layers, at
# most 32 tokens a sequence), not the one the search predicted: its step is a few micro-batches of overhead, not
# the full model's seconds. Assumed per micro-batch, an upper bound of what tiny trials measure on this project's
# 2-core CI machine (0.07-0.26 s a step at one or two micro-batches); the budget's step is the lower of this and
# the full model's prediction.
ASSUMED_TINY_MICRO_BATCH_S = 0.15


class Trial(BaseModel):
    """One candidate: what the search predicted, and what this machine measured (or why it could not)."""

    label: str  # the strategy family, as `plan` prints it
    key: str  # the matrix key: the same plan on the same hardware is the same trial
    predicted_rank: int
    predicted_step_s: float | None
    measured_step_s: float | None = None
    tokens_per_s: float | None = None
    peak_memory_bytes: int | None = None
    status: str = "pending"  # ok | oom | error | timeout | pending
    error: str | None = None
    record_id: str | None = None
    launch_overhead_s: float | None = None  # its share of its launch's start-up plus its set-up, when it ran now
    collective: str | None = None  # the collective carrying most of its predicted traffic (tune_links.py)
    predicted_comm_s: float | None = None  # that traffic's predicted seconds per step

    @property
    def ratio(self) -> float | None:
        """Measured over predicted step time (above 1: slower than predicted)."""
        if self.measured_step_s and self.predicted_step_s:
            return self.measured_step_s / self.predicted_step_s
        return None


def tune_matrix(spec: ModelSpec, cluster: ClusterSpec, plans: list[Plan], *, tiny: bool) -> BenchmarkMatrix:
    """The top plans as a matrix of trials on `cluster` (their order is the predicted one)."""
    if not plans:
        raise UserInputError("no plan fits, so there is nothing to tune; `hardware-selector plan` says what would fit")
    digest = spec_hash(spec)
    matrix = BenchmarkMatrix(
        generated_at=datetime.now(timezone.utc).replace(microsecond=0),
        model=spec.name,  # as `train` records it: a local checkpoint's name, not its path (matched by spec hash)
        # A --tiny trial measures the shrunken architecture: its records must never stand for the model's own
        # step time (calibrate.py matches measurements by this hash), nor calibrate its predictions.
        model_spec_hash=f"{digest}-tiny" if tiny else digest,
        tiny=tiny,
        hardware="cpu" if cluster.gpu.kind == "cpu" else "cuda",
        gpu=cluster.gpu.name,
        gpu_note="the cluster the tune was asked for",
        seq_len=plans[0].config.seq_len,
        precision=plans[0].config.precision.value,
    )
    for plan in plans:
        matrix.entries.append(
            MatrixEntry(
                key=matrix_key(digest, tiny, cluster.gpu.name, cluster.world_size, cluster.num_nodes, plan.config),
                label=family_label(plan.config),
                gpu=cluster.gpu.name,
                world_size=cluster.world_size,
                gpus_per_node=cluster.gpus_per_node,
                nodes=cluster.num_nodes,
                strategy=strategy_family(plan.config),
                config=plan.config,
                predicted_memory_bytes=plan.memory.total,
                predicted=plan.throughput,
            )
        )
    return matrix


def timed_steps(
    budget_s: float,
    matrix: BenchmarkMatrix,
    launch_s: float = ASSUMED_LAUNCH_S,
    setup_s: float = ASSUMED_TRIAL_SETUP_S,
    most: int = MAX_TIMED_STEPS,
) -> int:
    """Timed steps per trial so that the launch and every trial, set-up and warm-up included, fit the budget,
    at most `most` (`tune --steps`); a one-line error when not even the fewest do."""
    slowest = max((_budget_step(entry, matrix.tiny) for entry in matrix.entries if entry.predicted), default=1.0)
    count = len(matrix.entries)
    per_trial = (budget_s - launch_s) / count - setup_s
    steps = math.floor(per_trial / slowest) - WARMUP_STEPS
    if steps < MIN_TIMED_STEPS:
        least = launch_s + count * (setup_s + (WARMUP_STEPS + MIN_TIMED_STEPS) * slowest)
        raise UserInputError(
            f"--budget {budget_s / 60:g} min is too small for {count} trial(s): the launch needs about "
            f"{launch_s:.0f} s to start, and each trial {setup_s:.0f} s to set up and "
            f"{WARMUP_STEPS + MIN_TIMED_STEPS} steps of up to {slowest:.3g} s{TINY_STEP_NOTE if matrix.tiny else ''}; "
            "give --budget "
            f"{math.ceil(least / 60)} or more, or fewer --candidates"
        )
    return min(steps, most)


TINY_STEP_NOTE = f" (the shrunken model's, assumed at {ASSUMED_TINY_MICRO_BATCH_S:g} s a micro-batch)"


def _budget_step(entry: MatrixEntry, tiny: bool) -> float:
    """The step time the budget counts for a trial: the prediction's, or with --tiny the shrunken model's."""
    predicted = entry.predicted.step_time_s if entry.predicted else 1.0
    if not tiny:
        return predicted
    return min(predicted, ASSUMED_TINY_MICRO_BATCH_S * entry.config.grad_accum)


def trials(
    matrix: BenchmarkMatrix,
    store: BenchmarkStore,
    overhead_s: dict[str, float] | None = None,
    fresh: dict[str, str] | None = None,
) -> list[Trial]:
    """Each entry as a trial, with its record: the one this tune just wrote (`fresh`: key -> record id), else the
    newest in the store (an earlier tune's). Records written within the same second have no order, so a tune's
    own are named by id, not found by time."""
    newest: dict[str, RunRecord] = {}
    keys, fresh = {entry.key for entry in matrix.entries}, fresh or {}
    for record in store.runs(gpu=matrix.gpu, model=matrix.model):  # newest first
        key = record.matrix_key
        if key in keys and key not in newest and fresh.get(key, record.id) == record.id:
            newest[key] = record
    found = []
    for rank, entry in enumerate(matrix.entries, 1):
        dominant = dominant_collective(entry.config, entry.predicted)
        trial = Trial(
            label=entry.label,
            key=entry.key,
            predicted_rank=rank,
            predicted_step_s=entry.predicted.step_time_s if entry.predicted else None,
            collective=dominant[0] if dominant else None,
            predicted_comm_s=dominant[1] if dominant else None,
        )
        record = newest.get(entry.key)
        if record is not None:
            peaks = record.peak_memory_per_rank_bytes or []
            trial = trial.model_copy(
                update={
                    "status": record.status.value,
                    "error": record.error,
                    "record_id": record.id,
                    "measured_step_s": record.step_time_median_s,
                    "tokens_per_s": record.tokens_per_s,
                    "peak_memory_bytes": max(peaks) if peaks else None,
                }
            )
            trial.launch_overhead_s = (overhead_s or {}).get(entry.key)
        found.append(trial)
    return found


def measured_order(found: list[Trial]) -> list[Trial]:
    """Measured tokens/s, highest first; trials that failed last, in their predicted order."""
    ran = sorted((t for t in found if t.status == "ok" and t.tokens_per_s), key=lambda t: -(t.tokens_per_s or 0))
    return ran + [t for t in found if t not in ran]


def order_changes(
    found: list[Trial], *, compare: bool = True, links: dict[str, float] | None = None, assumed_GBps: float = 0.0
) -> list[str]:
    """One line per trial whose place moved or (compare) whose measurement missed its prediction by 10% or more,
    with what the links measured here say of it (tune_links.py); without compare (a --tiny tune of the
    shrunken model) only the moves."""
    lines = []
    for place, trial in enumerate(measured_order(found), 1):
        if trial.status != "ok":
            lines.append(f"{trial.label} dropped: {trial.status} ({trial.error or 'no measurement'})")
            continue
        ratio = trial.ratio
        moved = f"#{trial.predicted_rank} -> #{place}"
        if ratio is None or not compare:
            if place != trial.predicted_rank:
                lines.append(f"{trial.label} {moved}: measured {trial.tokens_per_s:,.0f} tokens/s")
        elif place != trial.predicted_rank or abs(ratio - 1) >= 0.1:
            way = "slower" if ratio > 1 else "faster"
            steps = (trial.predicted_step_s, trial.measured_step_s)
            lines.append(
                f"{trial.label} {moved}: measured {abs(ratio - 1):.0%} {way} than predicted "
                f"({trial.measured_step_s:.3g} s/step against {trial.predicted_step_s:.3g})"
                + link_sentence(trial.collective, trial.predicted_comm_s, *steps, links or {}, assumed_GBps)
            )
    return lines


class TuneOutcome(BaseModel):
    timed_steps: int  # per trial run here; 0 when every trial was read back
    trials: list[Trial]
    skipped: int  # trials read back from the database (an earlier, interrupted tune measured them)
    launches: int  # torchrun launches this tune started (one, unless a trial failed)
    link_GBps: dict[str, float] = {}  # each collective's bus bandwidth here (backends/monitoring/link_probe.py)
    assumed_link_GBps: float = 0.0  # what the throughput model assumed per rank
    assumed_link_source: str = ""  # where that figure comes from (tune_links.assumed_link_source)


def scratch_folder(matrix: BenchmarkMatrix, store: BenchmarkStore) -> Path:
    """Where the trials' run folders live while the tune runs; the same for the same trials recorded in the
    same database, so a tune stopped in the middle of a launch finds the trials that launch had finished."""
    from benchmarks.harness.trials import scratch_folder as trials_scratch

    return trials_scratch("tune", Path(store.path), [entry.key for entry in matrix.entries])


def run_tune(
    spec: ModelSpec,
    cluster: ClusterSpec,
    plans: list[Plan],
    *,
    tiny: bool,
    budget_s: float,
    store: BenchmarkStore,
    options: RunOptions | None = None,
    memory_limit_gb: float | None = None,
    prepare: Callable[[dict[str, Path]], None] | None = None,
    run_command=None,
    token_cache: Path | None = None,
    remeasure: bool = False,
    most_steps: int = MAX_TIMED_STEPS,
) -> TuneOutcome:
    """The top plans measured here in one launch (or read back), budgeted; each trial recorded beside its
    prediction. options: the run's own data, tokenizer and weights (None: synthetic tokens); prepare: a look
    at the trial folders (by matrix key) before the launch; token_cache: where the trials tokenize the data
    (a run folder's data/, so its `train` finds the tokens); remeasure: run every trial again, neither reading
    the database's records of them nor an interrupted launch's finished folders (`tune --remeasure`);
    most_steps: the timed steps a trial takes at the most, however large the budget (`tune --steps`)."""
    from benchmarks.harness.processes import run_torchrun_command
    from benchmarks.harness.runner import record_outcome
    from benchmarks.harness.trials import launch_trials, prepare_trials, scratch_held
    from benchmarks_db.environment import current_environment
    from planner.progress import WorkProgress

    matrix = tune_matrix(spec, cluster, plans, tiny=tiny)
    # A trial that failed is tried again; one measured is not, unless asked (then the new record is the newest).
    done = set() if remeasure else store.done_matrix_keys(retry_failed=True)
    pending = [(entry, plan) for entry, plan in zip(matrix.entries, plans, strict=True) if entry.key not in done]
    # The budget is the trials' that run: those read back cost nothing (and none running, no budget to check).
    to_run = matrix.model_copy(update={"entries": [entry for entry, _ in pending]})
    steps = timed_steps(budget_s, to_run, most=most_steps) if pending else 0
    requests = [
        TrialRequest(key=entry.key, warmup=WARMUP_STEPS, steps=steps, tiny=tiny, memory_limit_gb=memory_limit_gb)
        for entry, _ in pending
    ]
    scratch = scratch_folder(matrix, store)
    with scratch_held(scratch):  # one process runs these trials at a time (a second tune: one line)
        if remeasure:
            shutil.rmtree(scratch, ignore_errors=True)  # an interrupted launch's finished trials: measured again too
        folders = prepare_trials([plan for _, plan in pending], requests, scratch, options, token_cache)
        if prepare is not None:
            prepare({request.key: folder for request, folder in zip(requests, folders, strict=True)})
        # The budget sets the steps; the launches are stopped only at twice it (a loaded machine runs late).
        labels = {folder: entry.label for folder, (entry, _) in zip(folders, pending, strict=True)}
        with WorkProgress("tune trials", total=len(folders)) as progress:
            runs = launch_trials(
                folders, cluster.world_size, 2 * budget_s, run_command or run_torchrun_command,
                on_done=lambda folder: progress.advance(1, note=f"{labels[folder]} ended"),
            )  # fmt: skip
        environment, entries = current_environment(), {entry.key: entry for entry, _ in pending}
        if tiny:  # the prediction is the full model's: a shrunken model's time beside it would calibrate nonsense
            entries = {key: entry.model_copy(update={"predicted": None}) for key, entry in entries.items()}
        recorded = [record_outcome(entries[run.key], matrix, environment, run.outcome, 2 * budget_s) for run in runs]
        for record in recorded:
            store.add(record)
        shutil.rmtree(scratch, ignore_errors=True)  # every trial is in the database now
    overheads = {run.key: run.overhead_s for run in runs if run.overhead_s is not None}
    return TuneOutcome(
        timed_steps=steps,
        trials=trials(matrix, store, overheads, fresh={record.matrix_key: record.id for record in recorded}),
        skipped=len(matrix.entries) - len(pending),
        launches=max((run.launches for run in runs), default=0),
        link_GBps=next((run.link_GBps for run in runs if run.link_GBps), {}),
        assumed_link_GBps=assumed_link_GBps(cluster),
        assumed_link_source=assumed_link_source(cluster),
    )
