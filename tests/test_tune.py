"""`tune`: the search's top plans measured here and re-ranked by what was measured (docs/running.md, "Tune").

The ranking, failure, relaunch and resume rules run against a stand-in for the trials' launch that writes fixed
measurements (the reference: the order those numbers give); real tunes run on 2 CPU ranks through torchrun and
the one runner, and their records and winner are read back from the database and the winner's plan.json.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

import pytest
from distributed import cli_in_process

from benchmarks.harness.tune import measured_order, order_changes, run_tune, timed_steps, tune_matrix
from benchmarks.harness.tune_links import dominant_collective
from benchmarks_db.store import BenchmarkStore
from planner.errors import UserInputError
from planner.hardware.cluster import make_cluster
from planner.models.resolve import resolve_model
from planner.rundir.trial import DONE_FILE, REQUEST_FILE, TrialDone, TrialRequest
from planner.search import PlanRequest, search_plans
from planner.search.strategy_layout import family_label
from planner.training_config import TrainingConfig


@pytest.fixture(scope="module")
def candidates():
    spec = resolve_model("gpt2")
    cluster = make_cluster("cpu", gpus_per_node=2)
    result = search_plans(spec, cluster, PlanRequest(seq_len=32, global_batch=8, top_k=3))
    assert len(result.candidates) == 3
    return spec, cluster, result.candidates[:3]


class FakeTrialsLaunch:
    """Stands in for torchrun running `python -m backends.runner.trials FOLDER...`: writes what each trial
    would (metrics.jsonl, run_summary.json, trial_done.json) with a fixed step time per trial, by predicted
    rank (1-based); None: that trial runs out of memory and ends the launch. `stop_after`: the tune is killed
    (KeyboardInterrupt) once that many trials of the launch have finished."""

    def __init__(self, matrix, step_s: dict[int, float | None], stop_after: int | None = None):
        self.by_key = {entry.key: step_s[rank] for rank, entry in enumerate(matrix.entries, 1)}
        self.launches: list[list[str]] = []
        self.stop_after = stop_after

    def __call__(self, target, nproc, timeout_s):
        assert target[:2] == ["-m", "backends.runner.trials"]
        self.launches.append([])
        for finished, folder in enumerate(map(Path, target[2:])):
            if self.stop_after is not None and finished == self.stop_after:
                raise KeyboardInterrupt
            request = TrialRequest.model_validate_json((folder / REQUEST_FILE).read_text())
            self.launches[-1].append(request.key)
            step = self.by_key[request.key]
            if step is None:
                return 1, "[rank0]: torch.OutOfMemoryError: CPU out of memory"
            write_trial(folder, request, step, nproc, links=PROBED if finished == 0 else {})
        return 0, ""


PROBED = {"all-gather": 2.5, "reduce-scatter": 2.0, "all-reduce": 1.5}  # GB/s per rank, the stand-in's probe


def write_trial(folder: Path, request: TrialRequest, step: float, nproc: int, links: dict | None = None) -> None:
    """What backends.runner.trials leaves in a trial folder that ran, with every step taking `step` s and a
    second of set-up."""
    rows = [{"kind": "train", "step": i, "step_s": step} for i in range(request.warmup + request.steps)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    summary = {"peak_memory_per_rank_bytes": [2**30] * nproc, "memory_kind": "host peak RSS"}
    (folder / "run_summary.json").write_text(json.dumps(summary))
    done = TrialDone(key=request.key, began=time.time(), wall_s=1.0 + step * len(rows), link_GBps=links or {})
    (folder / DONE_FILE).write_text(done.model_dump_json())


def tune_with(plans, store, launch, spec_cluster, tiny=True, **options):
    spec, cluster = spec_cluster
    return run_tune(spec, cluster, plans, tiny=tiny, budget_s=600, store=store, run_command=launch, **options)


def test_the_measured_order_decides_and_a_failure_is_dropped_with_its_reason(tmp_path, candidates):
    spec, cluster, plans = candidates
    matrix = tune_matrix(spec, cluster, plans, tiny=False)
    predicted = [entry.predicted.step_time_s for entry in matrix.entries]
    # The predicted best measures 3x its prediction, the third 0.5x; the second runs out of memory.
    launch = FakeTrialsLaunch(matrix, {1: 3 * predicted[0], 2: None, 3: 0.5 * predicted[2]})
    store = BenchmarkStore(tmp_path / "db.duckdb")
    outcome = tune_with(plans, store, launch, (spec, cluster), tiny=False)
    keys = [entry.key for entry in matrix.entries]
    # One launch for all three; the failure ends it, and the trial after it runs in a second launch.
    assert launch.launches == [keys[:2], keys[2:]] and outcome.launches == 2
    found = outcome.trials
    assert [trial.status for trial in found] == ["ok", "oom", "ok"]
    order = measured_order(found)
    tokens = {trial.predicted_rank: trial.tokens_per_s for trial in found}
    expected = sorted((rank for rank in (1, 3)), key=lambda rank: -tokens[rank]) + [2]
    assert [trial.predicted_rank for trial in order] == expected
    assert order[0].ratio == pytest.approx(0.5 if expected[0] == 3 else 3.0)
    lines = order_changes(found)
    assert any(line.startswith(f"{found[0].label} #1 -> #") and "200% slower than predicted" in line for line in lines)
    assert any("dropped: oom" in line and "OutOfMemoryError" in line for line in lines)
    # Why it moved, by the links: each trial's dominant collective at the probed rate against the assumed one.
    assert outcome.link_GBps == PROBED and outcome.assumed_link_GBps == pytest.approx(0.775 * 0.8)
    # The probed links are faster than assumed: they cannot explain the first trial, 3x slower than predicted,
    # and are named for the third, 2x faster, when its collective's time at their rate is a quarter of the gap.
    explained = order_changes(found, links=outcome.link_GBps, assumed_GBps=outcome.assumed_link_GBps)
    assumed = 0.775 * 0.8
    for trial, entry in zip(found, matrix.entries, strict=True):
        kind, comm_s = dominant_collective(entry.config, entry.predicted)
        line = next((line for line in explained if line.startswith(f"{trial.label} #")), "")
        if trial.status != "ok" or not comm_s:
            continue
        predicted_s = entry.predicted.step_time_s
        share = (comm_s * assumed / PROBED[kind] - comm_s) / (trial.measured_step_s - predicted_s)
        if share >= 0.25:
            assert line.endswith(
                f"; its {kind}s (predicted {comm_s:.3g} s of its {predicted_s:.3g} s step at {assumed:.3g} GB/s per "
                f"rank) ran here at {PROBED[kind]:.3g} GB/s: {min(share, 1):.0%} of the gap"
            )
        else:
            assert f"; not the links: its {kind}s at the {PROBED[kind]:.3g} GB/s per rank measured here" in line
            assert line.endswith("the rest is compute, at this machine's speed")
    assert any("not the links" in line for line in explained)
    # Each trial's overhead: its set-up (wall time less its steps, 1 s here) and a share of the launch's start.
    assert all(trial.launch_overhead_s == pytest.approx(1.0, abs=0.5) for trial in found if trial.status == "ok")
    # Every trial is a record beside its prediction: later plans on this hardware calibrate from it.
    records = {record.matrix_key: record for record in store.runs()}
    assert set(records) == set(keys)
    assert all(records[entry.key].predicted_step_time_s == entry.predicted.step_time_s for entry in matrix.entries)


def test_a_killed_tune_resumes_without_repeating_trials(tmp_path, candidates):
    spec, cluster, plans = candidates
    matrix = tune_matrix(spec, cluster, plans, tiny=True)
    keys = [entry.key for entry in matrix.entries]
    store = BenchmarkStore(tmp_path / "db.duckdb")
    times = {rank: entry.predicted.step_time_s for rank, entry in enumerate(matrix.entries, 1)}
    tune_with(plans[:1], store, FakeTrialsLaunch(matrix, times), (spec, cluster))  # an earlier tune's record
    with pytest.raises(KeyboardInterrupt):  # killed in the middle of its launch, after its first trial
        tune_with(plans, store, FakeTrialsLaunch(matrix, times, stop_after=1), (spec, cluster))
    again = FakeTrialsLaunch(matrix, times)
    outcome = tune_with(plans, store, again, (spec, cluster))
    # The recorded trial is read from the database, the killed launch's finished one from its folder.
    assert outcome.skipped == 1 and again.launches == [keys[2:]]
    assert [trial.status for trial in outcome.trials] == ["ok", "ok", "ok"] and len(store.runs()) == 3
    # --tiny trials time a shrunken model: their records carry no prediction and never match the model's own hash,
    # so they calibrate nothing (a new user's audit found a tiny tune turning gpt2's plan to 437% MFU).
    assert all(r.predicted_step_time_s is None and r.model_spec_hash.endswith("-tiny") for r in store.runs())
    from benchmarks_db.calibrate import plan_calibration

    adjust, summary = plan_calibration(spec, cluster, store.path)
    assert adjust is None or all(
        plan.throughput.step_time_s == pytest.approx(adjust(plan.config, plan.throughput).step_time_s) for plan in plans
    ), summary


def test_the_budget_counts_only_the_trials_that_run(tmp_path, candidates):
    """Found by a new user's audit (2026-11-30): a tune whose trials were all recorded refused a small budget as
    "too small for 3 trial(s)" though none would run, and a resumed one gave the trials left fewer steps than the
    budget holds. The budget is split over the trials that run; none running, the budget is not checked."""
    spec, cluster, plans = candidates
    matrix = tune_matrix(spec, cluster, plans, tiny=True)
    store = BenchmarkStore(tmp_path / "db.duckdb")
    times = {rank: entry.predicted.step_time_s for rank, entry in enumerate(matrix.entries, 1)}
    tune_with(plans[:2], store, FakeTrialsLaunch(matrix, times), (spec, cluster))  # two trials recorded
    rest = matrix.model_copy(update={"entries": matrix.entries[2:]})
    resumed = tune_with(plans, store, FakeTrialsLaunch(matrix, times), (spec, cluster), most_steps=10**6)
    assert resumed.skipped == 2 and resumed.timed_steps == timed_steps(600, rest, most=10**6)
    assert resumed.timed_steps > timed_steps(600, matrix, most=10**6)
    with pytest.raises(UserInputError):
        timed_steps(20, matrix)  # too small for three trials...
    spec_cluster = (spec, cluster)
    read_back = run_tune(
        *spec_cluster, plans, tiny=True, budget_s=20, store=store, run_command=FakeTrialsLaunch(matrix, times)
    )
    assert read_back.skipped == 3 and read_back.timed_steps == 0 and read_back.launches == 0  # ...but none run


def test_a_second_process_on_the_same_trials_is_one_line(tmp_path, candidates):
    """Found by a new user's audit: two tunes of the same plans against one database shared a scratch folder, and
    the second deleted the first's running trial folders and failed with a traceback. The trials' folder is held by
    one process; a second is told who holds it. (flock is per open file, so this process stands in for both.)"""
    from benchmarks.harness.trials import scratch_held
    from benchmarks.harness.tune import scratch_folder

    spec, cluster, plans = candidates
    matrix = tune_matrix(spec, cluster, plans, tiny=True)
    store = BenchmarkStore(tmp_path / "db.duckdb")
    times = {rank: entry.predicted.step_time_s for rank, entry in enumerate(matrix.entries, 1)}
    held = r"these trials are being measured by PID \d+ since .*; wait for it"
    with scratch_held(scratch_folder(matrix, store)), pytest.raises(UserInputError, match=held):
        tune_with(plans, store, FakeTrialsLaunch(matrix, times), (spec, cluster))
    assert store.runs() == []  # nothing ran, nothing recorded
    assert tune_with(plans, store, FakeTrialsLaunch(matrix, times), (spec, cluster)).launches == 1  # once let go


def test_a_tiny_trial_of_a_gpu_plan_run_on_cpu_says_where_it_ran(tmp_path, capsys):
    """Found by a new user's audit (2026-11-30): `tune --tiny` of an H100 plan on this CPU was listed by `db list`
    as 2 x H100-80GB runs. Its record keeps the planned GPU (tune reads its trials back by it: relabelled `cpu`,
    the trials came back pending, as a review found) and says where it ran; `db list` marks it (CPU)."""
    from hardware_selector_cli.app import main

    spec = resolve_model("gpt2")
    cluster = make_cluster("H100-80GB", gpus_per_node=2)
    plans = search_plans(spec, cluster, PlanRequest(seq_len=32, global_batch=8, top_k=1)).candidates[:1]
    matrix = tune_matrix(spec, cluster, plans, tiny=True)
    store = BenchmarkStore(tmp_path / "db.duckdb")
    outcome = tune_with(plans, store, FakeTrialsLaunch(matrix, {1: 0.01}), (spec, cluster))  # host peak RSS
    assert [trial.status for trial in outcome.trials] == ["ok"]
    (record,) = store.runs()
    assert (record.gpu_name, record.interconnect, record.tiny) == ("H100-80GB", "host-memory", True)
    assert main(["db", "list", "--db", str(store.path)]) == 0
    out = capsys.readouterr().out
    assert "2×H100-80GB (CPU)" in out and "(CPU): a --tiny trial of that GPU's plan" in out


def test_the_budget_sets_the_timed_steps_and_a_budget_too_small_is_one_line(candidates):
    spec, cluster, plans = candidates
    matrix = tune_matrix(spec, cluster, plans, tiny=False)
    slowest = max(entry.predicted.step_time_s for entry in matrix.entries)
    steps = timed_steps(600, matrix, launch_s=15, setup_s=5)
    assert steps == min(50, int(((600 - 15) / 3 - 5) / slowest) - 2)
    assert timed_steps(600, matrix, launch_s=15, setup_s=5, most=4) == 4 < steps  # `tune --steps 4`: fewer
    assert timed_steps(600, matrix, launch_s=15, setup_s=5, most=10**6) > 50  # or more, as the budget holds
    import typer

    from benchmarks.harness.tune import MAX_TIMED_STEPS
    from hardware_selector_cli.app import app

    tune = typer.main.get_command(app).commands["tune"]  # type: ignore[attr-defined]
    assert [param.default for param in tune.params if param.name == "steps"] == [MAX_TIMED_STEPS] == [50]
    with pytest.raises(UserInputError, match="--budget 0.5 min is too small for 3 trial"):
        timed_steps(30, matrix, launch_s=15, setup_s=5)


def test_a_collective_is_blamed_only_when_the_measured_link_accounts_for_the_miss():
    """Found by a new user's audit: "FSDP grad-op: measured 816% slower than predicted (0.11 s/step against
    0.012); its all-gathers (predicted 0.00116 s ...) ran here at 0.574 GB/s": a link 7% slower explains 0.1 ms
    of a 98 ms gap. The collective is named only when it accounts for a material share of the gap."""
    from benchmarks.harness.tune_links import link_sentence

    audit = link_sentence("all-gather", 0.00116, 0.012, 0.11, {"all-gather": 0.574}, 0.62)
    assert audit.startswith("; not the links: its all-gathers at the 0.574 GB/s per rank measured here")
    assert "+9.3e-05 s of the +0.098 s gap" in audit and audit.endswith("compute, at this machine's speed")
    # Half the step on a link at half the assumed rate: the whole 0.5 s gap is the links.
    slow = link_sentence("all-reduce", 0.5, 1.0, 1.5, {"all-reduce": 0.31}, 0.62)
    assert slow == (
        "; its all-reduces (predicted 0.5 s of its 1 s step at 0.62 GB/s per rank) ran here at 0.31 GB/s: "
        "100% of the gap"
    )
    assert link_sentence("all-reduce", 0.5, 1.0, 1.5, {}, 0.62) == ""  # not probed: nothing said


def test_a_tiny_tunes_budget_counts_the_shrunken_models_steps(candidates):
    """Found by a new user's audit: `tune --tiny --budget 1 --candidates 3` refused "4 steps of up to 2.76 s"
    (the full model's prediction) though the shrunken model's steps took 0.18-0.26 s."""
    from benchmarks.harness.tune import ASSUMED_TINY_MICRO_BATCH_S

    spec, cluster, plans = candidates
    matrix = tune_matrix(spec, cluster, plans, tiny=True)
    assert max(entry.predicted.step_time_s for entry in matrix.entries) > 2  # the full model's seconds
    slowest = max(ASSUMED_TINY_MICRO_BATCH_S * entry.config.grad_accum for entry in matrix.entries)
    assert timed_steps(60, matrix, launch_s=15, setup_s=5) == min(50, int(((60 - 15) / 3 - 5) / slowest) - 2)
    with pytest.raises(UserInputError, match=r"steps of up to [\d.]+ s \(the shrunken model's, assumed at"):
        timed_steps(30, matrix, launch_s=15, setup_s=5)


def test_bad_input_is_one_line_and_nothing_is_written(tmp_path):
    folder, taken = tmp_path / "run", tmp_path / "taken"
    assert cli_in_process("plan", "-m", "gpt2", "--gpu", "cpu", "--emit", folder).returncode == 0
    taken.mkdir()
    (taken / "mine.txt").write_text("the user's")
    before = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*"))
    for args, message in (
        (["tune", str(tmp_path)], "has no plan.json"),
        (["tune", "-m", "gpt2", "--gpu", "cpu", "--candidates", "0"], "--candidates must be at least 1"),
        (["tune", "-m", "gpt2", "--gpu", "cpu", "--budget", "0.1"], "too small for"),
        (["tune", "-m", "gpt2", "--gpu", "cpu", "--steps", "1"], "--steps is the timed steps per trial, at least 2"),
        # Found by a new user's audit: a flag tune RUN_DIR would ignore, and an --emit that could not be written
        # told only after every trial had run.
        (["tune", str(folder), "--global-batch", "64"], "drop --global-batch"),
        # And cluster flags beside RUN_DIR were ignored without a word (the folder's cluster is what is tuned).
        (
            ["tune", str(folder), "--gpus-per-node", "1", "--nodes", "3", "--price", "9"],
            "drop --gpus-per-node, --nodes",
        ),
        # So were --headroom, --optimizer, --implementation and the model's dimensions (--objective, like the
        # search's other restrictions, now replaces the folder's own).
        (["tune", str(folder), "--headroom", "0.3", "--optimizer", "sgd"], "drop --headroom, --optimizer"),
        (["tune", str(folder), "--layers", "2"], "drop --layers"),
        (["tune", "-m", "gpt2", "--gpu", "cpu", "--emit", str(taken)], "already exists; pass --force"),
        (["tune", "-m", "gpt2", "--gpu", "cpu", "--emit", "/proc/tuned"], "--emit: cannot write /proc/tuned/"),
        # Found by a new user's audit: a plan.json named instead of its folder read ".../plan.json/plan.json", and
        # --tokens beside RUN_DIR was refused for a reason that was not its own.
        (["tune", str(folder / "plan.json")], "plan.json is a file, not a run folder; emit a run folder"),
        (["tune", str(folder), "--tokens", "1e6"], "ranks by the training length its plan.json recorded"),
        # Found by a new user's audit: a --db in a "folder" that is a file was refused after every trial had run.
        (["tune", "-m", "gpt2", "--gpu", "cpu", "--db", str(taken / "mine.txt" / "x.duckdb")], "is a file, not a"),
        (
            ["plan", "-m", "gpt2", "--gpu", "cpu", "--emit", str(tmp_path / "x"), "--steps", "2", "--epochs", "2"],
            "--steps and --epochs both say how long to train",
        ),
    ):
        result = cli_in_process(*args)
        assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*")) == before


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


def test_an_elastic_folder_stays_elastic_when_its_winner_is_emitted(tmp_path, monkeypatch):
    """The winner of `tune RUN_DIR` on a folder emitted with --elastic keeps the node range, with its own
    fallback table (the same search plan --elastic runs for it), and the candidates are the families whose
    checkpoints reshard."""
    from benchmarks.harness import processes
    from planner.elastic_plan import RESHARDABLE

    def later_is_faster(target, nproc, timeout_s, launcher="torchrun"):  # the predicted last measures fastest
        folders = [Path(folder) for folder in target[2:]]
        for place, folder in enumerate(folders):
            write_trial(
                folder, TrialRequest.model_validate_json((folder / REQUEST_FILE).read_text()), 1.0 / (place + 1), nproc
            )
        return 0, ""

    monkeypatch.setattr(processes, "run_torchrun_command", later_is_faster)
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(tmp_path / "db.duckdb"))
    run_dir = tmp_path / "run"
    plan = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "32", "--global-batch", "8"]
    emitted = cli_in_process(*plan, "--emit", run_dir, "--elastic", "1:2")
    assert emitted.returncode == 0, emitted.stderr
    before = json.loads((run_dir / "plan.json").read_text())
    tuned = cli_in_process("tune", run_dir, "--candidates", "2", "--budget", "5", "--tiny")
    assert tuned.returncode == 0, tuned.stderr
    after = json.loads((run_dir / "plan.json").read_text())
    winner = after["tune"]["winner"]
    assert winner == after["tune"]["trials"][1]["label"] and family_label(TrainingConfig(**after["config"])) == winner
    reshardable = {strategy.value for strategy in RESHARDABLE}
    assert {
        json.loads(record.config_json)["strategy"] for record in BenchmarkStore(tmp_path / "db.duckdb").runs()
    } <= reshardable
    elastic = after["elastic"]
    assert (elastic["min_nodes"], elastic["max_nodes"]) == (
        before["elastic"]["min_nodes"],
        before["elastic"]["max_nodes"],
    )
    own = next(entry for entry in elastic["fallbacks"] if entry["world_size"] == 2)
    assert own["config"] == after["config"]  # the winner is its own node count's entry
