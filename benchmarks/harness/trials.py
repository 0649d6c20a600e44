"""A tune's trials, or a benchmark matrix's entries of one world size, in as few launches as it takes: one,
unless a trial fails (docs/running.md, "Tune"; docs/benchmarks.md).

`prepare_trials` writes one run folder per candidate plan, each with the run's own options (its data,
tokenizer and weights, or synthetic tokens), a trial.json saying what to time (planner/rundir/trial.py), and
one token cache shared by every folder, so the data is tokenized once. `launch_trials` starts one torchrun
job of `python -m backends.runner.trials` over all the folders: the ranks import torch and start their
process group once, and build each trial's model and optimizer in turn. When a trial fails (out of memory,
an error, the runner's memory guard), that launch ends with it; the failure is recorded from the launch's
output and the trials after it are launched again. What a trial cost beside its steps is its share of its
launch's start-up (from the launch to its first trial) plus its own set-up (its wall time less its steps).
The time allowed is all the launches' (a tune's budget) or each trial's own (a matrix's --timeout: a hung
trial is killed after it, and the trials after it launched again with theirs).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel

from benchmarks.harness.jobs import MeasureResult
from benchmarks.harness.processes import LaunchOutcome, run_torchrun_command
from planner.errors import UserInputError
from planner.files import write_json_atomic
from planner.plan import Plan
from planner.rundir.trial import DONE_FILE, REQUEST_FILE, TrialDone, TrialRequest

SHARED_CACHE = "token-cache"
TAIL_CHARS = 4000  # of a failed launch's output, kept with its record
# A rank's own one-line error (the runner's UserInputError, "error: ...") and a raised exception's last line.
ONE_LINE_ERROR = re.compile(r"^(\[rank\d+\]:\s*)?error: ")
EXCEPTION_LINE = re.compile(r"^(\[rank\d+\]:\s*)?([A-Za-z_][\w.]*(Error|Exception|Exceeded)): ")


def failure_output(stderr: str) -> str:
    """What a failed launch's record keeps of its output: the tail, after the ranks' one-line errors from before
    it (torchrun's summary and the other ranks' tracebacks that follow a rank's error can push it out of the tail;
    a new user's audit found an out-of-memory trial recorded with torchrun's errors.html line for its reason)."""
    tail = stderr[-TAIL_CHARS:]
    said = [line for line in stderr[:-TAIL_CHARS].splitlines() if ONE_LINE_ERROR.search(line.strip())]
    return "\n".join([*said[-3:], tail]) if len(stderr) > TAIL_CHARS and said else tail


class TrialRun(BaseModel):
    """What one trial's launch gave: its measurement, or the launch output its failure is read from."""

    key: str
    outcome: LaunchOutcome
    overhead_s: float | None = None  # its share of the launch's start-up plus its own set-up
    launches: int = 0  # the launch it ran in (1 is the first; 0: an interrupted tune's, read back)
    link_GBps: dict[str, float] = {}  # the links probed after the launch's first trial


def scratch_folder(purpose: str, store_path: Path, identity: list[str]) -> Path:
    """Where trials' run folders live while they run: the same for the same trials (`identity`) recorded in the
    same database, so a run stopped in the middle of a launch finds the trials that launch had finished."""
    named = [str(Path(store_path).resolve()), *identity]
    digest = hashlib.sha256("\n".join(named).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"hardware-selector-{purpose}-{digest}"


@contextmanager
def scratch_held(scratch: Path) -> Iterator[None]:
    """The trials of `scratch` run by this process alone: a second tune or matrix of the same trials (the same
    scratch folder) would delete the first one's running folders and time its trials on the same cores. An
    exclusive flock on a file beside the folder (the folder itself is deleted when the trials are recorded); it
    goes with the process, however it ends."""
    import fcntl
    import os

    # Left in place when the trials end: removing a lock file races a process about to take it.
    path = scratch.with_name(scratch.name + ".lock")
    try:
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 (held until the trials end)
    except OSError as error:  # another user's lock on a shared /tmp, say
        raise UserInputError(
            f"cannot open {path} to hold these trials: {error.strerror or error}; set TMPDIR to a folder of yours"
        ) from None
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise UserInputError(
                f"these trials are being measured by {holder} (same plans, same database); wait for it to end or "
                "stop it: two launches of them would share these cores and delete each other's trial folders"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"PID {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        handle.flush()
        yield
    finally:
        handle.close()


def trial_folder_name(key: str) -> str:
    return "trial-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def prepare_trials(
    plans: list[Plan], requests: list[TrialRequest], scratch: Path, options=None, token_cache: Path | None = None
) -> list[Path]:
    """One run folder per plan under `scratch`, in the order given, named by its trial's key, so a tune run
    again over the same scratch folder finds the trials it had finished; a plan whose folder cannot be
    written gets a folder holding only its trial.json and the reason, and fails when launched. Every folder's
    data/ is `token_cache` (default: one under `scratch`), so the data is tokenized once."""
    from planner.rundir.write import emit_run_folder

    cache = (token_cache or scratch / SHARED_CACHE).resolve()  # a run folder's own data/: its `train` reuses them
    cache.mkdir(parents=True, exist_ok=True)
    folders = []
    for plan, request in zip(plans, requests, strict=True):
        folder = scratch / trial_folder_name(request.key)
        if (folder / DONE_FILE).is_file():
            folders.append(folder)  # measured by an interrupted tune; read back, not run again
            continue
        if folder.exists():
            shutil.rmtree(folder)  # a trial an interrupted tune had begun: begin it again
        try:
            emit_run_folder(plan, folder, options=options)
            (folder / "data").symlink_to(cache, target_is_directory=True)
        except UserInputError as error:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "cannot-emit.txt").write_text(f"cannot emit its run folder: {error}\n", encoding="utf-8")
        write_json_atomic(folder / REQUEST_FILE, request.model_dump())
        folders.append(folder)
    return folders


def launch_trials(
    folders: list[Path],
    nproc: int,
    timeout_s: float,
    run_command=run_torchrun_command,
    on_done: Callable[[Path], None] | None = None,
    *,
    per_trial: bool = False,
    on_run: Callable[[TrialRun], None] | None = None,
) -> list[TrialRun]:
    """Every folder's trial, launching again after each failure until each has run or the time is spent.
    timeout_s: all the launches' (a tune's budget), or with per_trial each trial's own, counted from the end of
    the trial before it in its launch (the first's from the launch's start): a hung trial is killed after it,
    and the trials after it are launched again with theirs (a benchmark matrix's --timeout).
    on_done: told of each folder as its trial ends, measured or failed, while its launch goes on (a progress
    bar); on_run: given each trial's run on this thread as soon as it is known (after its launch; when the
    launch is interrupted, those that ended before the interrupt), so a caller can record it there."""
    runs: list[TrialRun] = []
    tell = on_done or (lambda folder: None)

    def add(run: TrialRun) -> None:
        runs.append(run)
        if on_run is not None:
            on_run(run)

    for folder in folders:  # an interrupted tune's trials that ended before it was stopped
        if (folder / DONE_FILE).is_file():
            record = TrialDone.model_validate_json((folder / DONE_FILE).read_text(encoding="utf-8"))
            result = _measured(folder, record.key, nproc)
            add(TrialRun(key=record.key, outcome=LaunchOutcome(returncode=0, results={record.key: result})))
            tell(folder)
    pending = [folder for folder in folders if not (folder / DONE_FILE).is_file()]
    deadline = time.monotonic() + timeout_s
    launches = 0
    while pending:
        emit_error = _emit_error(pending[0])
        if emit_error is not None:
            add(_failed(pending[0], LaunchOutcome(returncode=2, stderr_tail=emit_error), launches))
            tell(pending.pop(0))
            continue
        batch = pending[: next((i for i, folder in enumerate(pending) if _emit_error(folder)), len(pending))]
        # Per trial, the launch's cap is every trial's time; each is killed sooner, at its own deadline.
        left_s = timeout_s * len(batch) if per_trial else deadline - time.monotonic()
        if left_s <= 0:
            for folder in pending:
                add(_failed(folder, LaunchOutcome(returncode=None), launches))
                tell(folder)
            break
        launches += 1
        started = time.time()
        command = ["-m", "backends.runner.trials", *map(str, batch)]
        each = {"deadline": _each_trial_deadline(batch, timeout_s, started)} if per_trial else {}
        try:
            with _watching(batch, on_done):
                returncode, stderr = run_command(command, nproc, left_s, **each)
        except BaseException:  # Ctrl-C: the launch is killed (run_torchrun_command); what ended before it is kept
            if on_run is not None:
                for run in _ended(batch, nproc, started, launches):
                    add(run)
            raise
        for run in _ended(batch, nproc, started, launches):
            add(run)
        pending = [folder for folder in pending if not (folder / DONE_FILE).is_file()]
        if pending and pending[0] in batch:  # the trial that ended the launch: its failure, read from the output
            code = None if returncode is None else (returncode or 1)
            failed = pending.pop(0)
            add(_failed(failed, LaunchOutcome(returncode=code, stderr_tail=failure_output(stderr)), launches))
            tell(failed)
    return runs


def _ended(batch: list[Path], nproc: int, started: float, launches: int) -> list[TrialRun]:
    """The runs of the launch's trials that ended (left trial_done.json), each with its share of the start-up."""
    ran = [folder for folder in batch if (folder / DONE_FILE).is_file()]
    done = [TrialDone.model_validate_json((folder / DONE_FILE).read_text(encoding="utf-8")) for folder in ran]
    start_up_s = min((record.began for record in done), default=started) - started
    runs = []
    for folder, record in zip(ran, done, strict=True):
        result = _measured(folder, record.key, nproc)
        runs.append(
            TrialRun(
                key=record.key,
                outcome=LaunchOutcome(returncode=0, results={record.key: result}),
                overhead_s=_overhead(folder, result, record, start_up_s / len(batch)),
                launches=launches,
                link_GBps=record.link_GBps,
            )
        )
    return runs


def _each_trial_deadline(batch: list[Path], each_s: float, started: float) -> Callable[[], float]:
    """When the launch is to be killed: each_s after the last of its trials to end, or after its start (its
    first trial pays the start-up, as a launch of its own would)."""

    def deadline() -> float:
        ended = [(folder / DONE_FILE).stat().st_mtime for folder in batch if (folder / DONE_FILE).is_file()]
        return max(ended, default=started) + each_s

    return deadline


@contextmanager
def _watching(batch: list[Path], on_done: Callable[[Path], None] | None, every_s: float = 0.5) -> Iterator[None]:
    """While a launch runs, tell on_done of each of its folders whose trial.done appears (and of the rest that
    did at the end): the launch reports nothing else until it exits."""
    if on_done is None:
        yield
        return
    told: set[Path] = set()
    stop = threading.Event()

    def tell_new() -> None:
        for folder in batch:
            if folder not in told and (folder / DONE_FILE).is_file():
                told.add(folder)
                on_done(folder)

    def poll() -> None:
        while not stop.wait(every_s):
            tell_new()

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        tell_new()


def _overhead(folder: Path, result: MeasureResult, record: TrialDone, start_up_share_s: float) -> float | None:
    """Its share of the launch's start-up plus its own wall time less its steps (warm-up ones too)."""
    if not result.step_times_s:
        return None
    request = _request(folder)
    median = sorted(result.step_times_s)[len(result.step_times_s) // 2]
    return max(0.0, start_up_share_s + record.wall_s - (request.warmup + request.steps) * median)


def _request(folder: Path) -> TrialRequest:
    return TrialRequest.model_validate_json((folder / REQUEST_FILE).read_text(encoding="utf-8"))


def _emit_error(folder: Path) -> str | None:
    note = folder / "cannot-emit.txt"
    return note.read_text(encoding="utf-8").strip() if note.is_file() else None


def _failed(folder: Path, outcome: LaunchOutcome, launches: int) -> TrialRun:
    return TrialRun(key=_request(folder).key, outcome=outcome, launches=launches)


def _measured(folder: Path, key: str, nproc: int) -> MeasureResult:
    request = _request(folder)
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line]
    steps = [row for row in rows if row.get("kind") == "train"][request.warmup :]
    summary = json.loads((folder / "run_summary.json").read_text(encoding="utf-8"))
    if not steps:
        return MeasureResult(key=key, world_size=nproc, error=f"the trial wrote no step after {request.warmup}")
    return MeasureResult(
        key=key,
        world_size=nproc,
        step_times_s=[row["step_s"] for row in steps],
        peak_memory_per_rank_bytes=[int(peak) for peak in summary["peak_memory_per_rank_bytes"]],
        memory_kind=summary["memory_kind"],
    )
