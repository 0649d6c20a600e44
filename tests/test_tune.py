"""`tune`: the search's top plans measured here and re-ranked by what was measured (docs/running.md, "Tune").

The ranking, failure and resume rules run against a launcher that returns fixed measurements (the reference:
the order those numbers give); one end-to-end tune runs real trials on 2 CPU ranks through torchrun and the
one runner, and its records and winner are read back from the database and the winner's plan.json.
"""

from __future__ import annotations

import json
import shlex

import pytest
from distributed import cli_in_process

from benchmarks.harness.jobs import MeasureResult
from benchmarks.harness.processes import LaunchOutcome
from benchmarks.harness.runner import run_matrix
from benchmarks.harness.tune import measured_order, order_changes, timed_steps, trials, tune_matrix
from benchmarks_db.environment import current_environment
from benchmarks_db.store import BenchmarkStore
from planner.errors import UserInputError
from planner.hardware.cluster import make_cluster
from planner.models.resolve import resolve_model
from planner.search import PlanRequest, search_plans


@pytest.fixture(scope="module")
def candidates():
    spec = resolve_model("gpt2")
    cluster = make_cluster("cpu", gpus_per_node=2)
    result = search_plans(spec, cluster, PlanRequest(seq_len=32, global_batch=8, top_k=3))
    assert len(result.candidates) == 3
    return spec, cluster, result.candidates[:3]


class FixedLauncher:
    """Step times per trial, by predicted rank (1-based); None: the trial runs out of memory."""

    def __init__(self, matrix, step_s: dict[int, float | None]):
        self.by_key = {entry.key: step_s[rank] for rank, entry in enumerate(matrix.entries, 1)}
        self.calls: list[str] = []

    def __call__(self, jobs, nproc, timeout_s):
        (job,) = jobs
        self.calls.append(job.key)
        step = self.by_key[job.key]
        if step is None:
            return LaunchOutcome(returncode=1, stderr_tail="[rank0]: torch.OutOfMemoryError: CPU out of memory")
        result = MeasureResult(key=job.key, world_size=nproc, step_times_s=[step] * job.steps,
                               peak_memory_per_rank_bytes=[2**30, 2**30], memory_kind="rss")  # fmt: skip
        return LaunchOutcome(returncode=0, results={job.key: result})


def test_the_measured_order_decides_and_a_failure_is_dropped_with_its_reason(tmp_path, candidates):
    spec, cluster, plans = candidates
    matrix = tune_matrix(spec, cluster, plans, tiny=True)
    predicted = [entry.predicted.step_time_s for entry in matrix.entries]
    # The predicted best measures 3x its prediction, the third 0.5x; the second runs out of memory.
    launcher = FixedLauncher(matrix, {1: 3 * predicted[0], 2: None, 3: 0.5 * predicted[2]})
    store = BenchmarkStore(tmp_path / "db.duckdb")
    run_matrix(matrix, store, current_environment(), steps=4, warmup=2, launcher=launcher)
    found = trials(matrix, store)
    assert [trial.status for trial in found] == ["ok", "oom", "ok"]
    order = measured_order(found)
    tokens = {trial.predicted_rank: trial.tokens_per_s for trial in found}
    expected = sorted((rank for rank in (1, 3)), key=lambda rank: -tokens[rank]) + [2]
    assert [trial.predicted_rank for trial in order] == expected
    assert order[0].ratio == pytest.approx(0.5 if expected[0] == 3 else 3.0)
    lines = order_changes(found)
    assert any(line.startswith(f"{found[0].label} #1 -> #") and "200% slower than predicted" in line for line in lines)
    assert any("dropped: oom" in line and "OutOfMemoryError" in line for line in lines)
    # Every trial is a record beside its prediction: later plans on this hardware calibrate from it.
    records = {record.matrix_key: record for record in store.runs()}
    assert set(records) == {entry.key for entry in matrix.entries}
    assert all(records[entry.key].predicted_step_time_s == entry.predicted.step_time_s for entry in matrix.entries)


def test_a_killed_tune_resumes_without_repeating_trials(tmp_path, candidates):
    spec, cluster, plans = candidates
    matrix = tune_matrix(spec, cluster, plans, tiny=True)
    store = BenchmarkStore(tmp_path / "db.duckdb")
    times = {rank: entry.predicted.step_time_s for rank, entry in enumerate(matrix.entries, 1)}
    first = FixedLauncher(matrix, times)
    run_matrix(tune_matrix(spec, cluster, plans[:2], tiny=True), store, current_environment(), launcher=first)
    again = FixedLauncher(matrix, times)
    summary = run_matrix(matrix, store, current_environment(), launcher=again)
    assert summary.skipped_done == 2 and again.calls == [matrix.entries[2].key]
    assert [trial.status for trial in trials(matrix, store)] == ["ok", "ok", "ok"]


def test_the_budget_sets_the_timed_steps_and_a_budget_too_small_is_one_line(candidates):
    spec, cluster, plans = candidates
    matrix = tune_matrix(spec, cluster, plans, tiny=True)
    slowest = max(entry.predicted.step_time_s for entry in matrix.entries)
    steps = timed_steps(600, matrix, overhead_s=20)
    assert steps == min(50, int((200 - 20) / slowest) - 2)
    with pytest.raises(UserInputError, match="--budget 0.5 min is too small for 3 trial"):
        timed_steps(30, matrix, overhead_s=20)


def test_bad_input_is_one_line_and_nothing_is_written(tmp_path):
    for args, message in (
        (["tune", str(tmp_path)], "has no plan.json"),
        (["tune", "-m", "gpt2", "--gpu", "cpu", "--candidates", "0"], "--candidates must be at least 1"),
        (["tune", "-m", "gpt2", "--gpu", "cpu", "--budget", "0.1"], "too small for"),
    ):
        result = cli_in_process(*args)
        assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def running_md_tune_command() -> list[str]:
    """The first command of docs/running.md's tune example, as printed."""
    from project_sources import REPO

    text = (REPO / "docs" / "running.md").read_text(encoding="utf-8")
    block = text[text.index("<!-- tune-example") :]
    block = block[block.index("```bash\n") + len("```bash\n") : block.index("```\n", block.index("```bash"))]
    first = block.split("\nhardware-selector ", 1)[0].replace("\\\n", " ")
    return shlex.split(first)[1:]  # without the program's name


@pytest.mark.slow
def test_a_tune_runs_real_trials_and_emits_the_measured_winner(tmp_path, monkeypatch):
    """docs/running.md's example: 2 trials on 2 CPU ranks; the records, the table and the winner's plan.json."""
    db, out = tmp_path / "db.duckdb", tmp_path / "runs" / "tuned"
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(db))
    monkeypatch.chdir(tmp_path)
    args = running_md_tune_command()
    assert args[0] == "tune" and "--emit" in args
    result = cli_in_process(*args)
    assert result.returncode == 0, result.stderr
    store = BenchmarkStore(db)
    records = store.runs()
    assert len(records) == 2 and all(record.status.value == "ok" for record in records)
    document = json.loads((out / "plan.json").read_text())
    tune = document["tune"]
    assert [trial["record_id"] for trial in tune["trials"]] and {t["record_id"] for t in tune["trials"]} == {
        record.id for record in records
    }
    fastest = max(records, key=lambda record: record.tokens_per_s)
    assert tune["winner"] == next(t["label"] for t in tune["trials"] if t["record_id"] == fastest.id)
    assert document["config"]["strategy"] == json.loads(fastest.config_json)["strategy"]
    assert "meas/pred" in result.stdout and "launch s" in result.stdout
    assert "--tiny measures the shrunken architecture" in result.stdout


def test_a_tiny_trial_of_a_pipelined_plan_splits_the_shrunken_models_layers(tmp_path):
    """A plan's stage map counts the full model's layers; --tiny trains 4, so the trial takes the balanced split
    of as many chunks per rank as 4 layers allow (tune found this: the interleaved gpt2 plan failed its trial)."""
    from backends.runner.world import fit_tiny
    from backends.weights.model_factory import TINY_SIZES
    from planner.contract.layout import default_stage_layers
    from planner.rundir.plan_file import read_plan_file
    from planner.rundir.write import emit_run_folder

    spec, cluster = resolve_model("gpt2"), make_cluster("cpu", gpus_per_node=2)
    result = search_plans(spec, cluster, PlanRequest(seq_len=32, global_batch=4, top_k=5))
    pipelined = next(plan for plan in result.candidates if plan.layout.pp > 1)
    emit_run_folder(pipelined, tmp_path / "run")
    _, run = read_plan_file(tmp_path / "run")
    assert run.layout.pp * run.layout.virtual_stages > TINY_SIZES["layers"]  # the full model's split cannot fit
    fitted = fit_tiny(run, 32)
    chunks = fitted.layout.pp * fitted.layout.virtual_stages
    assert fitted.layout.stage_layers is None and chunks <= TINY_SIZES["layers"] and fitted.seq_len == 32
    assert sum(default_stage_layers(TINY_SIZES["layers"], chunks)) == TINY_SIZES["layers"]
