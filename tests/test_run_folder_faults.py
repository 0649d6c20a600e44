"""A run folder survives what happens to real runs: a re-emitted plan, a killed launcher, a full disk.

- `plan --emit DIR --force` over a trained run moves its checkpoints and
  metrics to DIR/previous/<time>/; the next `train` starts the new plan at
  step 1 instead of resuming the old plan's checkpoint, and the old run is
  kept whole. A fresh folder moves nothing.
- A resume names the checkpoint and the plan it was saved under; a checkpoint
  of another model (the same name, another config.json) or strategy is
  refused in one line by the launching process, before torchrun starts.
- Ctrl-C while the ranks still start is the one "interrupted:" line and exit
  code 130, as mid-run, and run_status.json says interrupted (not an
  earlier run's ending): the launching process records it.
- SIGKILL to the torchrun agent alone takes its ranks with it (they ask the
  kernel for that: backends/runner/failures.py); without that they would
  keep running as orphans.
- A disk that fills up during a save ends in one line naming the folder and
  the space needed, and the previous checkpoint stays intact: resumed, it
  gives the same losses the failed run logged (backends/runner/disk_space.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from scripts.demo_checkpoint import make_local_gpt2
from tests.distributed import REPO_ROOT, cpu_env, train_with_warm_ranks
from tests.distributed import cli_in_process as cli
from tests.test_runner_finetune import _no_rank_survives, assert_interrupted_with_the_signals_checkpoint
from tests.trained_run import shared_trained_run

pytestmark = pytest.mark.slow


def ok(completed):
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


def steps(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {row["step"]: row["loss"] for row in map(json.loads, lines) if row["kind"] == "train"}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    return shared_trained_run(tmp_path_factory)


@pytest.fixture(scope="module")
def user(tmp_path_factory, shared):
    """This file's folders, emitted for the shared run's model and text (read, never written here)."""
    return tmp_path_factory.mktemp("faults"), shared.model_dir, shared.corpus


def emit(user, name, *extra, model_dir=None):
    root, default_model, corpus = user
    plan = ["plan", "-m", model_dir or default_model, "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "64"]
    ok(cli(*plan, "--global-batch", "8", "--strategies", "ddp", "--data", corpus, "--emit", root / name, *extra))
    return root / name


@pytest.fixture(scope="module")
def trained(shared):
    """A fresh folder trained 2 steps with checkpoints at steps 1 and 2, and what its ranks printed
    (tests/trained_run.py, shared with tests/test_runner_bad_input.py: read only): the re-emit test continues a
    copy of it (the same plan.json: its own run), the refusals read its checkpoint."""
    return shared.run_dir, shared.train_stdout


def test_a_re_emitted_plan_starts_afresh_and_keeps_the_trained_run(user, trained):
    root, _, _ = user
    trained_dir, first = trained
    run_dir = root / "reemitted"
    shutil.copytree(trained_dir, run_dir)
    assert "starting afresh" not in first and not (trained_dir / "previous").exists()  # nothing to move
    old_losses = steps(run_dir)
    assert sorted(old_losses) == [1, 2]

    again = emit(user, "reemitted", "--global-batch", "16", "--force")
    assert again == run_dir and not (run_dir / "checkpoints").exists()
    (kept,) = (run_dir / "previous").iterdir()
    assert (kept / "checkpoints" / "global_step2" / "MANIFEST.json").is_file()
    assert steps(kept) == old_losses  # the old run's metrics, whole

    second = ok(train_with_warm_ranks(run_dir, "--steps", "1", "--save-every", "1"))
    assert "resuming" not in second.stdout and sorted(steps(run_dir)) == [1]
    assert '"global_batch": 16' in second.stdout  # RUN_RESULT: the new plan ran

    third = ok(train_with_warm_ranks(run_dir, "--steps", "2", "--save-every", "1"))
    assert (
        f"resuming from {run_dir.resolve() / 'checkpoints' / 'global_step1'} (step 1; saved under this plan.json: "
        "my-gpt2, ddp, global batch 16" in third.stdout
    ), third.stdout
    assert sorted(steps(run_dir)) == [1, 2]


def test_a_checkpoint_of_another_model_with_the_same_name_is_refused(user, trained):
    root, _, _ = user
    trained, _ = trained  # four layers, a checkpoint saved under ddp
    smaller, _ = make_local_gpt2(root / "other-user", layers=2)
    other = emit(user, "two-layers", model_dir=smaller)
    shutil.copytree(trained / "checkpoints", other / "checkpoints")
    refused = cli("train", other, "--steps", "2")
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr[-3000:]
    assert "holds a checkpoint of another my-gpt2 (its config.json differs)" in lines[0]
    assert "--no-resume" in lines[0]
    assert not (other / "logs").exists()  # refused by the launching process: torchrun never started
    # The same model under another strategy than the checkpoint's: one line naming both.
    refused = cli("train", trained, "--steps", "2", "--strategy", "fsdp")
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr[-3000:]
    assert "was saved by strategy ddp, and this run uses fsdp; resume with --strategy ddp" in lines[0]


def test_the_full_run_after_a_tiny_smoke_test_starts_afresh_and_keeps_the_smoke_test_aside(tmp_path):
    """README: `train runs/ft --tiny --steps 3`, then the run. The smoke test's checkpoint (a shrunken model)
    was refused as "another my-gpt2" and the run did not start without --no-resume; it is moved aside instead."""
    model_dir, corpus = make_local_gpt2(tmp_path / "user")
    run_dir = tmp_path / "ft"
    plan = ["plan", "-m", model_dir, "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "64", "--global-batch", "8"]
    ok(cli(*plan, "--strategies", "ddp", "--data", corpus, "--emit", run_dir))
    ok(train_with_warm_ranks(run_dir, "--tiny", "--steps", "1", "--save-every", "1", "--no-record"))
    assert (run_dir / "checkpoints" / "global_step1").is_dir()
    full = ok(train_with_warm_ranks(run_dir, "--steps", "1", "--no-record"))
    assert "resuming" not in full.stdout and "starting afresh: the --tiny smoke test's state is kept in" in full.stdout
    (kept,) = (run_dir / "previous").iterdir()
    assert (kept / "checkpoints" / "global_step1").is_dir() and '"tiny": false' in full.stdout


@pytest.mark.parametrize("save_every", [0, 5])
def test_ctrl_c_mid_run_says_interrupted_and_where_the_next_train_starts(tmp_path, save_every):
    """Ctrl-C during `train` printed "error: the run failed (exit code 1)" and run_status.json said "resumes from
    the newest checkpoint" when none had been saved: it is one line saying interrupted, the step, and where the
    next `train` starts, with exit code 130; no rank is left, and run_status.json says interrupted, not running.
    The ranks checkpoint the step they agree on, under --save-every 0 too (tests/test_runner_finetune.py resumes
    from such a checkpoint after a SIGTERM)."""
    model_dir, corpus = make_local_gpt2(tmp_path / "user")
    run_dir = tmp_path / "ft"
    plan = ["plan", "-m", model_dir, "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "64", "--global-batch", "8"]
    ok(cli(*plan, "--strategies", "ddp", "--data", corpus, "--emit", run_dir, "--steps", "2000"))
    command = [sys.executable, "-m", "hardware_selector", "train", str(run_dir), "--no-record"]
    command += ["--save-every", str(save_every)] if save_every else []
    train = subprocess.Popen(
        command, env=cpu_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    assert train.stdout is not None
    for line in train.stdout:  # plain lines on a pipe, one every 10 steps
        if line.startswith("step 10/"):
            break
    os.killpg(train.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
    _, err = train.communicate(timeout=120)
    assert train.returncode == 130, err[-3000:]
    (last,) = [line for line in err.splitlines() if line.startswith(("interrupted:", "error:"))]
    assert last.startswith("interrupted: SIGINT at step "), err[-3000:]
    _no_rank_survives(run_dir, within_s=60)
    step = assert_interrupted_with_the_signals_checkpoint(run_dir, "SIGINT")  # saved on the signal, either way
    saved = run_dir / "checkpoints" / f"global_step{step}"
    assert (
        last
        == f"interrupted: SIGINT at step {step}; checkpoint saved at step {step}: `hardware-selector train` resumes from {saved}"
    )


def test_ctrl_c_while_the_ranks_start_says_interrupted_and_replaces_an_earlier_runs_status(tmp_path):
    """Ctrl-C while the ranks were still importing printed "error: the run failed (exit code 1)" (or -15), and
    run_status.json kept an earlier run's ending: the ranks record "interrupted" only once their loop is set
    up. The launching process now knows it was stopped, says so in the one line, and marks the run interrupted."""
    model_dir, corpus = make_local_gpt2(tmp_path / "user")
    run_dir = tmp_path / "ft"
    plan = ["plan", "-m", model_dir, "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "64", "--global-batch", "8"]
    ok(cli(*plan, "--strategies", "ddp", "--data", corpus, "--emit", run_dir))
    earlier = {"state": "finished", "step": 3, "started_at": 1.0, "updated_at": 2.0, "message": ""}
    (run_dir / "run_status.json").write_text(json.dumps(earlier))
    train = _train_in_its_own_session(run_dir, "--no-record", "--steps", "2000")
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(_ranks_of(run_dir)) < 2:  # started: importing torch, not training
            time.sleep(0.05)
        assert len(_ranks_of(run_dir)) == 2 and not (run_dir / "metrics.jsonl").exists()
        os.killpg(train.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
        _, err = train.communicate(timeout=120)
    finally:
        os.killpg(train.pid, signal.SIGKILL) if train.poll() is None else None
    then = "no checkpoint was saved yet: `hardware-selector train` starts again at step 1 (--save-every N)"
    expected = f"SIGINT before the ranks began training; {then}"
    assert train.returncode == 130, err[-3000:]
    verdicts = [line for line in err.splitlines() if line.startswith(("interrupted:", "error:"))]
    assert verdicts == [f"interrupted: {expected}"], err[-3000:]
    status = json.loads((run_dir / "run_status.json").read_text())
    assert status["state"] == "interrupted" and status["message"] == expected, status
    assert status["updated_at"] > earlier["updated_at"] and "step" not in status  # none of the earlier run's
    assert _ranks_of(run_dir) == []


def _train_in_its_own_session(run_dir, *flags):
    """`hardware-selector train RUN_DIR FLAGS` as a terminal starts it: its own process group, stderr kept."""
    return subprocess.Popen(
        [sys.executable, "hardware_selector.py", "train", str(run_dir), *flags],
        cwd=REPO_ROOT,
        env=cpu_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _ranks_of(run_dir):
    found = []
    for process in psutil.process_iter(["cmdline"]):
        command = " ".join(process.info["cmdline"] or [])
        if "backends.run" in command and str(run_dir) in command and "torch.distributed.run" not in command:
            found.append(process)
    return found


def test_killing_the_torchrun_agent_alone_leaves_no_orphaned_ranks(user):
    run_dir = emit(user, "orphans")
    train = _train_in_its_own_session(run_dir, "--steps", "100000", "--save-every", "0")
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not ((run_dir / "metrics.jsonl").is_file() and steps(run_dir)):
            time.sleep(0.2)
        ranks = _ranks_of(run_dir)
        assert len(ranks) == 2, "the ranks should be training by now"
        (agent,) = [
            child
            for child in psutil.Process(train.pid).children()
            if "torch.distributed.run" in " ".join(child.cmdline())
        ]
        agent.send_signal(signal.SIGKILL)  # the agent only: its ranks get no signal from anybody else
        gone, alive = psutil.wait_procs(ranks, timeout=30)
        assert alive == [], f"orphaned ranks: {[p.pid for p in alive]}"
        train.wait(timeout=60)
        assert train.returncode != 0
    finally:
        os.killpg(train.pid, signal.SIGKILL) if train.poll() is None else None
        for process in _ranks_of(run_dir):
            process.kill()


def _can_mount_a_small_disk(tmp_path) -> bool:
    probe = tmp_path / "probe"
    probe.mkdir()
    completed = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {probe}"], capture_output=True
    )
    return completed.returncode == 0


def test_a_disk_that_fills_up_during_a_save_is_one_line_and_keeps_the_previous_checkpoint(user, tmp_path):
    if shutil.which("unshare") is None or not _can_mount_a_small_disk(tmp_path):
        pytest.skip("needs `unshare -rm` (user and mount namespaces) to mount a small tmpfs as the full disk")
    run_dir = emit(user, "full-disk")
    (run_dir / "checkpoints").mkdir()
    # One checkpoint of this model is 3.3 MiB: the first save fits in 5 MiB, the second does not (the first
    # is dropped only once the second is sealed). The tmpfs lives in the namespace, so copy what it holds out.
    script = (
        f"mount -t tmpfs -o size=5m tmpfs {run_dir}/checkpoints && "
        f"{sys.executable} hardware_selector.py train {run_dir} --steps 4 --save-every 2; "
        f"echo exit=$? >&2; cp -a {run_dir}/checkpoints {run_dir}/kept"
    )
    completed = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script], cwd=REPO_ROOT, env=cpu_env(), capture_output=True, text=True
    )
    *said, status = completed.stderr.strip().splitlines()
    assert status == "exit=1", completed.stderr[-3000:]
    errors = [line for line in said if line.startswith("error: ")]
    assert len(errors) == 1 and len(said) == 1, completed.stderr[-3000:]  # one line on the screen, no traceback
    assert "no space left on the device while saving checkpoint global_step4 in" in errors[0]
    assert "the save needs about 3." in errors[0] and "global_step2 is intact and the run resumes from it" in errors[0]
    kept = run_dir / "kept"
    assert (kept / "latest").read_text() == "global_step2" and sorted(p.name for p in kept.iterdir()) == [
        "global_step2",
        "latest",
    ]  # the half-written global_step4 was removed
    failed_run = steps(run_dir)
    assert sorted(failed_run) == [1, 2, 3, 4]

    (run_dir / "checkpoints").rmdir()  # the empty mount point
    kept.rename(run_dir / "checkpoints")
    resumed = ok(train_with_warm_ranks(run_dir, "--steps", "4", "--save-every", "2"))
    assert "resuming from" in resumed.stdout and "global_step2" in resumed.stdout
    assert steps(run_dir) == pytest.approx(failed_run, rel=1e-6)
