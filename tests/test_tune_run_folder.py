"""`tune RUN_DIR`: a run folder's tune searches what its plan searched, keeps its settings, refuses what the
folder fixes and says what happened to a trained run (docs/running.md, "tune"). Trials are stood in for by
`each_trial_ran`; tests/test_tune.py holds the tune itself and tests/test_tune_launch.py its real launches."""

from __future__ import annotations

import json
from pathlib import Path

from distributed import cli_in_process
from test_tune import PROBED, write_trial

from benchmarks_db.store import BenchmarkStore
from planner.hardware.cluster import make_cluster
from planner.rundir.trial import REQUEST_FILE, TrialRequest


def each_trial_ran(target, nproc, timeout_s, launcher="torchrun"):
    """Stands in for the trials' launch: every trial runs, at 1 s a step."""
    for folder in map(Path, target[2:]):
        write_trial(folder, TrialRequest.model_validate_json((folder / REQUEST_FILE).read_text()), 1.0, nproc)
    return 0, ""


def test_a_run_folders_tune_keeps_the_plans_headroom(tmp_path, monkeypatch):
    """Found by a new user's audit: `tune RUN_DIR` searched the folder's model and batch at the default 10%
    headroom, so a plan made with --headroom 0.5 came back from the tune with a winner sized for 90% of memory."""
    from benchmarks.harness import processes

    monkeypatch.setattr(processes, "run_torchrun_command", each_trial_ran)
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(tmp_path / "db.duckdb"))
    run_dir = tmp_path / "run"
    plan = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "32", "--global-batch", "4"]
    emitted = cli_in_process(*plan, "--headroom", "0.5", "--emit", run_dir)
    assert emitted.returncode == 0, emitted.stderr
    tuned = cli_in_process("tune", run_dir, "--candidates", "2", "--budget", "5", "--tiny")
    assert tuned.returncode == 0, tuned.stderr
    memory = json.loads((run_dir / "plan.json").read_text())["memory"]
    assert memory["headroom_fraction"] == 0.5
    assert memory["fits"] and memory["margin_bytes"] >= 0


def test_a_run_folders_tune_searches_what_the_plan_searched(tmp_path, monkeypatch):
    """Found by an audit: `tune RUN_DIR` re-searched every strategy family, so a plan made with --strategies ddp
    came back from the tune measured as ZeRO-2 with offload and FSDP, its DDP replaced. plan.json's run block now
    records the search's restrictions (--strategies, --ac, --no-offload, --micro-batch, --objective), the tune
    searches them again, and --strategies beside RUN_DIR replaces them, said in one line."""
    from benchmarks.harness import processes

    monkeypatch.setattr(processes, "run_torchrun_command", each_trial_ran)
    db = tmp_path / "db.duckdb"
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(db))
    run_dir = tmp_path / "run"
    plan = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "32", "--global-batch", "4"]
    emitted = cli_in_process(*plan, "--strategies", "ddp", "--ac", "none", "--no-offload", "--emit", run_dir)
    assert emitted.returncode == 0, emitted.stderr
    tuned = cli_in_process("tune", run_dir, "--budget", "5", "--tiny")
    assert tuned.returncode == 0, tuned.stderr
    measured = [json.loads(record.config_json) for record in BenchmarkStore(db).runs()]
    assert measured and all(config["strategy"] == "ddp" for config in measured)
    assert all(config["activation_checkpointing"] == "none" for config in measured)
    search = json.loads((run_dir / "plan.json").read_text())["run"]["search"]
    assert search == {
        "strategies": ["ddp"],
        "activation_checkpointing": ["none"],
        "allow_offload": False,
        "micro_batch": None,
        "objective": "throughput",
        "train_tokens": None,
    }
    after = json.loads((run_dir / "plan.json").read_text())
    assert after["config"]["strategy"] == "ddp" and after["run"]["search"] == search  # a second tune: the same
    # Widened on purpose: --strategies beside the folder replaces its strategies (its other restrictions hold).
    widened = cli_in_process("tune", run_dir, "--strategies", "ddp,fsdp", "--budget", "5", "--tiny")
    assert widened.returncode == 0, widened.stderr
    assert "--strategies replace the search plan.json recorded (strategies ddp)" in widened.stderr
    strategies = {json.loads(record.config_json)["strategy"] for record in BenchmarkStore(db).runs()}
    assert strategies == {"ddp", "fsdp"}
    assert json.loads((run_dir / "plan.json").read_text())["run"]["search"] == {
        **search,
        "strategies": ["ddp", "fsdp"],
    }


def test_a_plan_json_without_the_search_block_reads_as_the_whole_search(tmp_path):
    """A folder emitted before plan.json recorded the search's restrictions still loads: the whole search."""
    from planner.contract.run_config import SearchRestrictions
    from planner.rundir.plan_file import read_plan_file

    run_dir = tmp_path / "run"
    assert cli_in_process("plan", "-m", "gpt2", "--gpu", "cpu", "--emit", run_dir).returncode == 0
    document = json.loads((run_dir / "plan.json").read_text())
    del document["run"]["search"]
    (run_dir / "plan.json").write_text(json.dumps(document))
    assert read_plan_file(run_dir)[1].search == SearchRestrictions()


def test_a_folder_being_trained_is_not_re_emitted_under_its_run(tmp_path, monkeypatch):
    """Found by a new user's audit: `plan --emit DIR --force` (and `tune DIR`) while `train DIR` ran moved the
    run's checkpoints and metrics to previous/ and replaced plan.json under it; the run died at its next write
    (its TensorBoard file gone) and left a failed status and new metrics in the new folder. Both are one line
    naming the run, before any trial, and the folder is as it was."""
    from backends.runner.run_lock import hold_run_lock

    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(tmp_path / "db.duckdb"))
    run_dir = tmp_path / "run"
    plan = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "32", "--global-batch", "4"]
    assert cli_in_process(*plan, "--emit", run_dir).returncode == 0
    (run_dir / "metrics.jsonl").write_text('{"kind": "train", "step": 1}\n')
    lock = hold_run_lock(run_dir)  # a run in progress, as `train` holds it
    assert lock is not None
    try:
        before = {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()}
        for args in ([*plan, "--emit", run_dir, "--force"], ["tune", run_dir, "--budget", "5", "--tiny"]):
            result = cli_in_process(*args)
            lines = result.stderr.strip().splitlines()
            assert result.returncode == 2 and len(lines) == 1, result.stderr
            assert "is being trained by PID" in lines[0] and "from under it" in lines[0]
            assert {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()} == before
    finally:
        lock.close()


def _trained_folder(tmp_path, monkeypatch) -> tuple[Path, dict]:
    """A DDP folder as `train` leaves it (checkpoints, final/, metrics), with the trials stood in for."""
    from benchmarks.harness import processes

    monkeypatch.setattr(processes, "run_torchrun_command", each_trial_ran)
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(tmp_path / "db.duckdb"))
    run_dir = tmp_path / "run"
    plan = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "32", "--global-batch", "4"]
    assert cli_in_process(*plan, "--strategies", "ddp", "--emit", run_dir).returncode == 0
    (run_dir / "metrics.jsonl").write_text('{"kind": "train", "step": 1}\n')
    for name in ("checkpoints/step_1", "final"):
        (run_dir / name).mkdir(parents=True)
        (run_dir / name / "model.safetensors").write_text("weights")
    return run_dir, _state(run_dir)


def _state(run_dir: Path) -> dict:
    """The folder's files but the run lock, which a tune holds while it measures, as `train` does."""
    return {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file() and path.name != ".train.lock"}


def test_a_trained_folder_whose_winner_is_its_own_plan_keeps_its_trained_run(tmp_path, monkeypatch):
    """Found by a new user's audit: `tune RUN_DIR` on a trained folder moved its checkpoints and final/ to
    previous/<time>/ even when the winner was the folder's own plan, so `watch` said nothing had trained and
    from_pretrained('RUN_DIR/final') failed. The trained run stays; plan.json takes the trials."""
    run_dir, before = _trained_folder(tmp_path, monkeypatch)
    tuned = cli_in_process("tune", run_dir, "--candidates", "1", "--budget", "5", "--tiny")
    assert tuned.returncode == 0, tuned.stderr
    assert not (run_dir / "previous").exists()
    after = _state(run_dir)
    assert {path: data for path, data in after.items() if path.suffix != ".json" and path.parent != run_dir} == {
        path: data for path, data in before.items() if path.suffix != ".json" and path.parent != run_dir
    }
    assert (run_dir / "final" / "model.safetensors").read_text() == "weights"
    assert (run_dir / "metrics.jsonl").read_bytes() == before[run_dir / "metrics.jsonl"]
    assert json.loads((run_dir / "plan.json").read_text())["tune"]["winner"]
    assert "kept the trained run's checkpoints" in tuned.stderr


def test_a_trained_folder_is_not_pushed_aside_by_another_plan_without_force(tmp_path, monkeypatch):
    """The winner of another plan (here FSDP, over a DDP folder) would leave the trained run behind it: one line
    naming what would move, --force or --emit OTHER_DIR; with --force it moves, kept and said."""
    run_dir, before = _trained_folder(tmp_path, monkeypatch)
    other = ["tune", run_dir, "--candidates", "1", "--budget", "5", "--tiny", "--strategies", "fsdp"]
    refused = cli_in_process(*other)
    lines = [line for line in refused.stderr.splitlines() if not line.startswith("tune: --strategies replace")]
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr  # beside the override's own note
    assert "holds a trained run (checkpoints, final)" in lines[0] and "--force moves" in lines[0]
    assert "--emit OTHER_DIR" in lines[0]
    assert _state(run_dir) == before
    elsewhere = cli_in_process(*other, "--emit", tmp_path / "other")
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert _state(run_dir) == before and (tmp_path / "other" / "plan.json").is_file()
    forced = cli_in_process(*other, "--force")
    assert forced.returncode == 0, forced.stderr
    (kept,) = (run_dir / "previous").iterdir()
    assert (kept / "final" / "model.safetensors").read_text() == "weights"
    assert (kept / "metrics.jsonl").read_text() == '{"kind": "train", "step": 1}\n'
    assert f"moved the previous run's checkpoints, metrics.jsonl, final to {kept} (kept, not resumed)" in (
        forced.stderr
    )


def test_a_multi_node_folder_is_refused_with_advice_that_works_for_a_folder(tmp_path):
    """Found by a new user's audit: `tune RUN_DIR` on a 2-node folder said "tune one node's layout here (--nodes
    1)", and `tune RUN_DIR --nodes 1` was refused with the same line (RUN_DIR's own cluster is what is tuned);
    docs/running.md said such a plan "is tuned one node's layout at a time". The line says what works."""
    run_dir = tmp_path / "run"
    plan = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--nodes", "2", "--seq-len", "32"]
    assert cli_in_process(*plan, "--global-batch", "8", "--emit", run_dir).returncode == 0
    result = cli_in_process("tune", run_dir, "--budget", "5", "--tiny")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "the plan is for 2 nodes; emit a one-node folder of it (plan ... --nodes 1 --emit DIR)" in lines[0]
    assert "--nodes 1)," not in lines[0]


def test_a_gpu_plan_without_tiny_on_a_machine_without_cuda_is_one_line_before_any_trial(tmp_path, monkeypatch):
    """Found by a new user's audit: `tune -m gpt2 --gpu H100-80GB` (no --tiny) on a CPU machine started a torchrun
    launch per candidate, each failing "this plan runs on CUDA GPUs", recorded three failed runs in the database
    and ended "no trial ran to the end". It is train's one line, before any launch, and nothing is recorded."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    db = tmp_path / "db.duckdb"
    plan = ["-m", "gpt2", "--gpu", "H100-80GB", "--gpus-per-node", "2", "--seq-len", "32", "--global-batch", "4"]
    result = cli_in_process("tune", *plan, "--budget", "1", "--db", db)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "this plan runs on CUDA GPUs (device cuda, nccl) and this machine has none; pass --tiny" in lines[0]
    assert not db.exists()


def test_the_assumed_link_speed_names_where_it_comes_from(tmp_path, monkeypatch):
    """The line read "the plan assumed 0.62" and did not say that 0.62 is the catalog's intra-node link times the
    model's link efficiency (an audit)."""
    from benchmarks.harness import processes

    def probed(target, nproc, timeout_s, launcher="torchrun"):
        for folder in map(Path, target[2:]):
            request = TrialRequest.model_validate_json((folder / REQUEST_FILE).read_text())
            write_trial(folder, request, 1.0, nproc, links=PROBED)
        return 0, ""

    monkeypatch.setattr(processes, "run_torchrun_command", probed)
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(tmp_path / "db.duckdb"))
    plan = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "32", "--global-batch", "8"]
    assert cli_in_process(*plan, "--strategies", "ddp", "--emit", tmp_path / "run").returncode == 0
    tuned = cli_in_process("tune", tmp_path / "run", "--candidates", "1", "--budget", "5", "--tiny")
    assert tuned.returncode == 0, tuned.stderr
    assert (
        f"; the plan assumed {0.775 * 0.8:.3g} = the intra-node link [intra-node: gloo over loopback TCP, 0.775 "
        "GB/s/dir (catalog)] x link efficiency 0.8 [assumed, planner/throughput/constants.py]\n"
    ) in tuned.stdout
    from benchmarks.harness.tune_links import assumed_link_source

    given = make_cluster("cpu", gpus_per_node=2, intra_bw=3)
    assert assumed_link_source(given).startswith("the intra-node link [intra-node: 3 GB/s/dir (user)] x ")


def test_a_folder_is_held_while_its_tune_measures_and_a_run_beside_it_is_one_line(tmp_path, monkeypatch):
    """Found by a new user's audit (2026-11-30): `train RUN_DIR` started beside `tune RUN_DIR` ran to its end on
    the cores the trials were timed on (their records calibrated later plans from that), and a second tune of the
    same folder failed with a traceback in the first one's trial folders. The tune holds the folder's run lock
    while it measures, as `train` does, and the lock's line says it is a tune; it lets go when it ends."""
    from backends.runner.run_lock import LOCK_FILE, TUNING, hold_run_lock, run_alive
    from benchmarks.harness import processes

    seen: list[tuple[bool | None, str]] = []

    def trials_while_held(target, nproc, timeout_s, launcher="torchrun"):
        seen.append((run_alive(run_dir), (run_dir / LOCK_FILE).read_text()))
        return each_trial_ran(target, nproc, timeout_s, launcher)

    monkeypatch.setattr(processes, "run_torchrun_command", trials_while_held)
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(tmp_path / "db.duckdb"))
    run_dir = tmp_path / "run"
    plan = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "32", "--global-batch", "4"]
    assert cli_in_process(*plan, "--emit", run_dir).returncode == 0
    tuned = cli_in_process("tune", run_dir, "--candidates", "1", "--budget", "5", "--tiny")
    assert tuned.returncode == 0, tuned.stderr
    (alive, holder), *_ = seen
    assert alive is True and holder.splitlines()[1] == TUNING
    assert run_alive(run_dir) is False  # let go when the tune ended
    tuning = hold_run_lock(run_dir, TUNING)  # a tune in progress, as another process would hold it
    assert tuning is not None
    try:
        before = _state(run_dir)
        for args in (["train", run_dir, "--steps", "1"], ["tune", run_dir, "--budget", "5", "--tiny"]):
            result = cli_in_process(*args)
            lines = result.stderr.strip().splitlines()
            assert result.returncode == 2 and len(lines) == 1, result.stderr
            assert "is being tuned by PID" in lines[0] and "wait for that tune to end" in lines[0], lines[0]
        assert _state(run_dir) == before
    finally:
        tuning.close()


def test_a_folder_whose_model_folder_is_gone_is_refused_before_any_trial(tmp_path, monkeypatch):
    """Found by a new user's audit (2026-11-30): `tune RUN_DIR` ran every trial and wrote the winner for a folder
    whose model folder had been moved, which the next `train` then refused. The folder's model is checked as
    `train` checks it, before the trials."""
    import shutil

    from benchmarks.harness import processes
    from scripts.demo_checkpoint import make_local_gpt2
    from tests.trained_run import emit_args

    launched: list[object] = []
    monkeypatch.setattr(processes, "run_torchrun_command", lambda *args, **kwargs: launched.append(args) or (0, ""))
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(tmp_path / "db.duckdb"))
    model_dir, corpus = make_local_gpt2(tmp_path / "user")
    run_dir = tmp_path / "run"
    assert cli_in_process(*emit_args(model_dir, corpus, run_dir)).returncode == 0
    shutil.move(model_dir, tmp_path / "moved")
    result = cli_in_process("tune", run_dir, "--candidates", "1", "--budget", "5", "--tiny")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert f"{model_dir.resolve()}, the model folder this run was emitted from (plan.json), does not exist" in lines[0]
    assert not launched
