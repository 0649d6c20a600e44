"""The progress bar of long work (planner/progress.py): a rich bar with an ETA on a terminal, plain lines at each
tenth elsewhere once the work has lasted a few seconds, and the tune's bar told of each trial as it ends."""

from __future__ import annotations

import io

import pytest
from test_tune import FakeTrialsLaunch, tune_with

from benchmarks.harness.tune import tune_matrix
from benchmarks_db.store import BenchmarkStore
from planner.hardware.cluster import make_cluster
from planner.models.resolve import resolve_model
from planner.progress import WorkProgress, format_duration
from planner.search import PlanRequest, search_plans


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_a_short_job_prints_nothing_and_a_long_one_a_line_a_tenth_with_its_eta():
    clock, stream = Clock(), io.StringIO()
    with WorkProgress("importing runs.csv", total=20, stream=stream, clock=clock) as progress:
        for _ in range(4):  # 4 of 20 within the first 5 s: quiet
            clock.now += 1
            progress.advance()
        assert stream.getvalue() == ""
        clock.now += 4  # 8 s for the first 5: 1.6 s each, 15 to go
        progress.advance()
        assert stream.getvalue() == f"importing runs.csv: 25%, ETA {format_duration(8 / 5 * 15)}\n"
        for _ in range(15):
            clock.now += 1
            progress.advance(note="row")
    lines = stream.getvalue().splitlines()
    # The first line, then one at each tenth passed (30%, 40%, ... 100%), and no ETA once it is done.
    assert [line.split(": ")[1].split("%")[0] for line in lines] == ["25"] + [str(p) for p in range(30, 101, 10)]
    assert lines[-1] == "importing runs.csv: 100% (row)"


def test_the_eta_is_the_elapsed_time_scaled_by_what_remains_and_the_total_is_never_passed():
    clock = Clock()
    progress = WorkProgress("tokenizing", total=1000, unit="B", stream=io.StringIO(), clock=clock)
    assert progress.eta_s() is None
    clock.now += 30
    progress.advance(250)
    assert progress.eta_s() == pytest.approx(30 / 250 * 750)
    progress.advance(5000)  # characters past the file's bytes (an estimate): held at the total
    assert progress.done == 1000 and progress.eta_s() == 0


def test_on_a_terminal_it_is_a_rich_bar_that_ends_full():
    stream = Terminal()
    with WorkProgress("tune trials", total=3, stream=stream) as progress:
        assert progress.bar is not None
        for _ in range(3):
            progress.advance(note="ZeRO-3 ended")
    shown = stream.getvalue()
    assert "tune trials: ZeRO-3 ended" in shown and "3/3" in shown and "ETA" in shown


def test_the_tunes_bar_is_told_of_every_trial_as_it_ends_the_failed_one_too(tmp_path, monkeypatch):
    spec, cluster = resolve_model("gpt2"), make_cluster("cpu", gpus_per_node=2)
    plans = search_plans(spec, cluster, PlanRequest(seq_len=32, global_batch=8, top_k=3)).candidates[:3]
    matrix = tune_matrix(spec, cluster, plans, tiny=True)
    told: list[str] = []
    real_advance = WorkProgress.advance

    def advance(self, amount=1, *, note=""):
        told.append(note)
        real_advance(self, amount, note=note)

    monkeypatch.setattr(WorkProgress, "advance", advance)
    launch = FakeTrialsLaunch(matrix, {1: 0.1, 2: None, 3: 0.2})  # the second fails and ends its launch
    tune_with(plans, BenchmarkStore(tmp_path / "db.duckdb"), launch, (spec, cluster))
    assert sorted(told) == sorted(f"{entry.label} ended" for entry in matrix.entries)


def test_a_db_import_on_a_terminal_shows_its_rows_going_in(tmp_path, monkeypatch):
    from benchmarks_db.transfer import export_runs, import_runs
    from tests.db_samples import sample_record

    source = BenchmarkStore(tmp_path / "source.duckdb")
    source.add_many([sample_record(micro_batch=n) for n in (1, 2, 3)])
    export_runs(source, tmp_path / "runs.csv")
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert import_runs(BenchmarkStore(tmp_path / "target.duckdb"), tmp_path / "runs.csv").imported == 3
    assert "importing runs.csv" in terminal.getvalue() and "3/3" in terminal.getvalue()


def test_a_total_learned_late_is_what_the_tenths_count():
    clock, stream = Clock(), io.StringIO()
    with WorkProgress("benchmarking", total=10, stream=stream, clock=clock, quiet_s=0) as progress:
        progress.set_total(4)  # 6 of the 10 configs were already in the database
        clock.now += 1
        progress.advance()
    assert stream.getvalue().startswith("benchmarking: 25%")
