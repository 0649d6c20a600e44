"""A benchmark matrix's entries of one world size share a launch (docs/benchmarks.md, "Measuring").

run_matrix goes through the real launcher (benchmarks/harness/launch.py: run folders, trial.json, the relaunch
rules of benchmarks/harness/trials.py) with a stand-in for torchrun running `python -m backends.runner.trials`
that writes what each trial would, so the launch count, the failure and timeout rules and the resume are checked
in seconds; tests/test_calibration_loop.py runs the real launch.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from test_run_training_benchmark import tiny_matrix
from test_tune import write_trial

import run_training_benchmark
from benchmarks.harness import launch
from benchmarks.harness.launch import backends_run_launch
from benchmarks.harness.processes import _communicate
from benchmarks.harness.runner import run_matrix
from benchmarks.harness.trials import scratch_folder
from benchmarks_db.environment import current_environment
from benchmarks_db.store import BenchmarkStore
from planner.rundir.trial import DONE_FILE, REQUEST_FILE, TrialRequest

STEP_S = 0.1


@pytest.fixture(autouse=True)
def scratch_in_tmp_path(tmp_path, monkeypatch):
    """The matrix's scratch folders (the system's temporary folder) in the test's own: a stopped matrix keeps its."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


class StandInTrials:
    """Stands in for torchrun running `python -m backends.runner.trials FOLDER...`: the folders in turn, passing
    over those with trial_done.json, as the real runner does. What each key does: "ok" (busy_s, then measured),
    "oom" (ends the launch as an out-of-memory rank does), "hang" (until the launch is killed at its deadline),
    "interrupt" (Ctrl-C as it begins), "sigterm" (SIGTERM to this process as it begins)."""

    def __init__(self, kinds: dict[str, str], busy_s: float = 0.0):
        self.kinds, self.busy_s = kinds, busy_s
        self.launches: list[tuple[int, list[str]]] = []  # (ranks, the keys it began)
        self.seconds: list[float] = []  # each launch's wall time
        self.requests: dict[str, TrialRequest] = {}

    def __call__(self, target, nproc, timeout_s, deadline=None):
        assert target[:2] == ["-m", "backends.runner.trials"]
        began = time.time()
        self.launches.append((nproc, []))
        try:
            return self._run(map(Path, target[2:]), nproc, lambda: min(began + timeout_s, (deadline or _never)()))
        finally:
            self.seconds.append(time.time() - began)

    def _run(self, folders, nproc, killed_at) -> tuple[int | None, str]:
        for folder in folders:
            if (folder / DONE_FILE).is_file():
                continue
            request = TrialRequest.model_validate_json((folder / REQUEST_FILE).read_text())
            self.launches[-1][1].append(request.key)
            self.requests[request.key] = request
            kind = self.kinds[request.key]
            if kind == "interrupt":
                raise KeyboardInterrupt
            if kind == "sigterm":  # `kill` of the harness: run-training-benchmark turns it into the Ctrl-C above
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            if kind == "oom":
                return 1, "[rank0]: torch.OutOfMemoryError: CPU out of memory"
            busy_until = time.time() + (math.inf if kind == "hang" else self.busy_s)
            while time.time() < busy_until:
                if time.time() >= killed_at():
                    return None, ""  # what run_torchrun_command returns for a launch killed at its timeout
                time.sleep(0.02)
            write_trial(folder, request, STEP_S, nproc)
        return 0, ""


def _never() -> float:
    return math.inf


def _measure(matrix, store, trials: StandInTrials, timeout_s: float = 60.0, launcher=None, progress=None):
    """run_matrix through the real launcher, torchrun replaced by `trials`."""

    def launch(jobs, nproc, timeout_s, **seams):
        return backends_run_launch(jobs, nproc, timeout_s, run_command=trials, **seams)

    return run_matrix(
        matrix,
        store,
        current_environment(),
        steps=3,
        warmup=1,
        timeout_s=timeout_s,
        launcher=launcher or launch,
        on_progress=None if progress is None else lambda entry, status: progress.append((entry.key, status.value)),
    )


def _statuses(store: BenchmarkStore) -> dict[str, str]:
    return {record.matrix_key: record.status.value for record in store.runs()}


def test_entries_of_one_world_size_share_one_launch(tmp_path):
    matrix = tiny_matrix([1, 2], gpu_counts=(1, 2), strategies=("ddp", "fsdp"))
    by_world = {world: [entry.key for entry in matrix.entries if entry.world_size == world] for world in (1, 2)}
    assert len(by_world[1]) == 2 and len(by_world[2]) == 4  # one rank: DDP only
    trials, progress = StandInTrials(dict.fromkeys(by_world[1] + by_world[2], "ok")), []
    store = BenchmarkStore(tmp_path / "db.duckdb")
    summary = _measure(matrix, store, trials, progress=progress)
    assert trials.launches == [(1, by_world[1]), (2, by_world[2])] and summary.launches == 2
    assert summary.recorded == {"ok": 6} and len(store.runs()) == 6
    # --steps, --warmup and tiny reach each trial; the warm-up steps are left out of the timing.
    assert all((r.steps, r.warmup, r.tiny) == (3, 1, True) for r in trials.requests.values())
    assert all(record.steps_measured == 3 and record.step_time_median_s == STEP_S for record in store.runs())
    assert sorted(progress) == sorted((key, "ok") for key in trials.kinds)  # the bar moved once per entry
    identity = ["steps=3 warmup=1", *(entry.key for entry in matrix.entries)]
    assert not scratch_folder("matrix", store.path, identity).exists()  # every entry recorded: nothing kept


def test_a_failing_entry_is_recorded_and_the_entries_after_it_launched_again(tmp_path):
    matrix = tiny_matrix([1, 2, 4])
    first, failing, last = (entry.key for entry in matrix.entries)
    trials, progress = StandInTrials({first: "ok", failing: "oom", last: "ok"}), []
    store = BenchmarkStore(tmp_path / "db.duckdb")
    summary = _measure(matrix, store, trials, progress=progress)
    assert trials.launches == [(2, [first, failing]), (2, [last])] and summary.launches == 2
    assert _statuses(store) == {first: "ok", failing: "oom", last: "ok"}
    (oom,) = (record for record in store.runs() if record.matrix_key == failing)
    assert oom.error == "[rank0]: torch.OutOfMemoryError: CPU out of memory"
    assert progress == [(first, "ok"), (failing, "oom"), (last, "ok")]


def test_a_hung_entry_costs_its_own_timeout_and_no_one_elses(tmp_path):
    """Each entry has --timeout from the end of the entry before it: four entries of 0.6 s each fit a 1 s
    timeout although the launch runs longer than 1 s, and a hang is killed 1 s after the entry before it
    ended (not at the launch's cap of 1 s per entry), the entries after it measured in a launch of their own."""
    matrix = tiny_matrix([1, 2, 4, 8])
    first, hung, third, fourth = keys = [entry.key for entry in matrix.entries]
    trials = StandInTrials({first: "ok", hung: "hang", third: "ok", fourth: "ok"}, busy_s=0.6)
    store = BenchmarkStore(tmp_path / "db.duckdb")
    summary = _measure(matrix, store, trials, timeout_s=1.0)
    assert trials.launches == [(2, keys[:2]), (2, keys[2:])] and summary.launches == 2
    assert _statuses(store) == {first: "ok", hung: "timeout", third: "ok", fourth: "ok"}
    (timeout,) = (record for record in store.runs() if record.matrix_key == hung)
    assert timeout.error == "killed after the 1 s timeout"
    killed_after, both_after = trials.seconds
    assert 1.6 <= killed_after < 3.0  # its predecessor's 0.6 s and its own 1 s; the launch's cap was 4 s
    assert both_after >= 1.2  # two entries of 0.6 s: over one timeout, each within its own


def test_an_interrupted_matrix_keeps_what_ended_and_resumes(tmp_path):
    matrix = tiny_matrix([1, 2, 4])
    first, interrupted, last = keys = [entry.key for entry in matrix.entries]
    store = BenchmarkStore(tmp_path / "db.duckdb")
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C (or SIGTERM, run-training-benchmark) as the second begins
        _measure(matrix, store, StandInTrials({first: "ok", interrupted: "interrupt", last: "ok"}))
    assert _statuses(store) == {first: "ok"}  # recorded on the way out
    again = StandInTrials(dict.fromkeys(keys, "ok"))
    summary = _measure(matrix, store, again)
    assert again.launches == [(2, keys[1:])] and summary.skipped_done == 1
    assert _statuses(store) == dict.fromkeys(keys, "ok")


def test_a_matrix_killed_before_it_could_record_reads_back_the_finished_trials(tmp_path):
    """Killed outright (nothing recorded on the way out): the trials its launch finished are in the scratch
    folder, and the next run records them without launching them again."""
    matrix = tiny_matrix([1, 2, 4])
    first, interrupted, last = keys = [entry.key for entry in matrix.entries]
    killed = StandInTrials({first: "ok", interrupted: "interrupt", last: "ok"})

    def recording_nothing(jobs, nproc, timeout_s, *, scratch, on_ended, on_run):
        return backends_run_launch(jobs, nproc, timeout_s, scratch=scratch, run_command=killed)

    store = BenchmarkStore(tmp_path / "db.duckdb")
    with pytest.raises(KeyboardInterrupt):
        _measure(matrix, store, killed, launcher=recording_nothing)
    assert store.runs() == []
    again = StandInTrials(dict.fromkeys(keys, "ok"))
    summary = _measure(matrix, store, again)
    assert again.launches == [(2, keys[1:])] and summary.launches == 1
    assert _statuses(store) == dict.fromkeys(keys, "ok") and summary.recorded == {"ok": 3}


def test_sigterm_stops_run_training_benchmark_as_ctrl_c_does(tmp_path, monkeypatch, capsys):
    argv = ["--model", "gpt2", "--tiny", "--hardware", "cpu", "--distributed", "--max-gpus", "2"]
    argv += ["--strategies", "ddp", "--micro-batches", "1", "2", "--checkpointing", "none"]
    assert run_training_benchmark.main([*argv, "--output", str(tmp_path / "matrix.json")]) == 0
    (matrix,) = json.loads((tmp_path / "matrix.json").read_text())["matrices"]
    keys = [entry["key"] for entry in matrix["entries"]]  # one rank's two, then two ranks' two
    trials = StandInTrials({keys[0]: "ok", keys[1]: "sigterm", **dict.fromkeys(keys[2:], "ok")})
    real = launch.backends_run_launch
    monkeypatch.setattr(launch, "backends_run_launch", lambda *args, **seams: real(*args, run_command=trials, **seams))
    before = signal.getsignal(signal.SIGTERM)
    db = tmp_path / "db.duckdb"
    assert run_training_benchmark.main([*argv, "--run", "--db", str(db)]) == 143  # 128 + SIGTERM, as train's
    assert "stopped: what ended before it is in" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) == before
    assert _statuses(BenchmarkStore(db)) == {keys[0]: "ok"} and trials.launches == [(1, keys[:2])]
    assert list(tmp_path.glob(f"hardware-selector-matrix-*/*/{DONE_FILE}"))  # kept for the next run to read back


def test_a_launch_is_killed_at_a_deadline_that_moves():
    """run_torchrun_command's wait: the deadline is asked again as the launch runs, and the cap still holds."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    process = subprocess.Popen(sleeper, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    began = time.time()
    moved = lambda: began + (0.5 if time.time() < began + 0.3 else 1.0)  # noqa: E731 (a trial ended at 0.3 s)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            _communicate(process, 30.0, moved)
        assert 1.0 <= time.time() - began < 2.5
        with pytest.raises(subprocess.TimeoutExpired):
            _communicate(process, 0.2, _never)
    finally:
        process.kill()
        process.communicate()
