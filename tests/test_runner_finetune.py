"""A user fine-tunes their own checkpoint on their own text, on this CPU, and the run survives being killed.

A run killed mid-epoch and started again continues the uninterrupted run's
loss curve exactly, and metrics.jsonl holds each step once. (The README's
quick start runs as printed in tests/test_clean_environment.py, in a venv of
the declared dependencies only.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from scripts.demo_checkpoint import make_local_gpt2
from tests.distributed import REPO_ROOT, cpu_env, run_torchrun, train_with_warm_ranks
from tests.distributed import cli_in_process as cli

pytestmark = pytest.mark.slow


def rows(run_dir, kind):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [row for row in map(json.loads, lines) if row["kind"] == kind]


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    model_dir, corpus = make_local_gpt2(root / "user")
    return root, model_dir, corpus


def emit(user, name, *extra):
    root, model_dir, corpus = user
    run_dir = root / name
    completed = cli(
        "plan",
        "-m",
        model_dir,
        "--gpu",
        "cpu",
        "--gpus-per-node",
        "2",
        "--seq-len",
        "64",
        "--global-batch",
        "8",
        "--strategies",
        "ddp",
        "--emit",
        run_dir,
        "--data",
        corpus,
        *extra,
    )
    assert completed.returncode == 0, completed.stderr
    return run_dir


@pytest.fixture(scope="module")
def uninterrupted(user):
    """The reference curve: the runner on 2 ranks as `train` starts it, its ranks forked warm
    (tests/warm_launch.py; a cold launch is ~12 s more CPU). The killed and resumed runs below go through
    `train`, the subject here."""
    whole = emit(user, "uninterrupted")
    run_torchrun(["-m", "backends.run", "--plan", str(whole), "--steps", "8", "--save-every", "0"], nproc=2)
    return [row["loss"] for row in rows(whole, "train")]


def kill_after_checkpoint(user, name: str, step: int):
    """Start `train --steps 8 --save-every 2` and SIGKILL the launcher (and, through it, every rank) once
    checkpoint `step` is sealed."""
    folder = emit(user, name)
    command = [sys.executable, "hardware_selector.py", "train", str(folder), "--steps", "8", "--save-every", "2"]
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=cpu_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 300
    while time.time() < deadline and not (folder / "checkpoints" / f"global_step{step}").is_dir():
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert (folder / "checkpoints" / f"global_step{step}").is_dir()
    return folder


@pytest.fixture(scope="module")
def killed(user):
    """One run killed once checkpoint 4 is sealed, no rank left; each resume test continues a copy of it (the
    same plan.json, so the copy's checkpoints are its own: backends/runner/checkpoints.py check_resumable)."""
    folder = kill_after_checkpoint(user, "killed", 4)
    _no_rank_survives(folder)
    return folder


def copy_of(killed, name: str):
    copy = killed.parent / name
    shutil.copytree(killed, copy)
    return copy


def test_a_run_killed_mid_epoch_resumes_on_the_uninterrupted_curve(killed, uninterrupted):
    resumed = copy_of(killed, "killed, resumed")
    completed = cli("train", resumed, "--steps", "8", "--save-every", "2")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "resuming from" in completed.stdout
    steps = [row["step"] for row in rows(resumed, "train")]
    assert steps == list(range(1, 9))  # each step once, the killed run's extra rows dropped
    assert [row["loss"] for row in rows(resumed, "train")] == pytest.approx(uninterrupted, rel=1e-6)


def test_a_checkpoint_resumes_on_another_number_of_processes_with_the_same_global_batch(killed, uninterrupted):
    """Saved by 2 ranks (2 x micro-batch 4), continued by 1 (accumulation 2): the same samples each step. `train`'s
    checks, then its rank forked warm: the resume is the subject (the test above resumes through `train`)."""
    resumed = copy_of(killed, "fewer processes")
    completed = train_with_warm_ranks(resumed, "--steps", "8", "--save-every", "2", "--nproc", "1")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "instead of the plan's 2: the global batch stays 8 with gradient accumulation 2" in completed.stdout
    assert [row["loss"] for row in rows(resumed, "train")] == pytest.approx(uninterrupted, rel=1e-5)


def test_a_relative_data_path_is_the_users_and_a_killed_cli_takes_its_ranks_along(user, tmp_path):
    """`train RUN --data mine.txt` reads ./mine.txt where the user stands (the project folder has none); SIGKILL
    of the CLI alone (not its process group) stops torchrun and every rank."""
    root, _, corpus = user
    folder = emit(user, "cli killed")
    here = tmp_path / "where the user stands"
    here.mkdir()
    (here / "mine.txt").write_text(corpus.read_text(encoding="utf-8"), encoding="utf-8")
    assert not (REPO_ROOT / "mine.txt").exists()
    command = [sys.executable, str(REPO_ROOT / "hardware_selector.py"), "train", str(folder), "--data", "mine.txt",
               "--steps", "500", "--save-every", "0"]  # fmt: skip
    process = subprocess.Popen(command, cwd=here, env=cpu_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if (folder / "metrics.jsonl").is_file() and '"kind": "train"' in (folder / "metrics.jsonl").read_text():
            break
        time.sleep(0.2)
    assert process.poll() is None, process.stderr.read().decode()[-2000:]  # training, on ./mine.txt
    process.kill()  # the CLI only: torchrun and the ranks are its children, not killed here
    process.wait()
    _no_rank_survives(folder, within_s=60)


def _no_rank_survives(run_dir, within_s: float = 1.0) -> None:
    import psutil

    deadline = time.time() + within_s
    while True:  # polled: a rank that is gone ends the wait at once, one still there by the deadline fails
        survivors = [p for p in psutil.process_iter(["cmdline"]) if str(run_dir) in " ".join(p.info["cmdline"] or [])]
        if not survivors or time.time() > deadline:
            break
        time.sleep(0.2)
    assert survivors == []


def test_sigterm_mid_run_checkpoints_that_step_and_the_resume_continues_the_uninterrupted_curve(user, uninterrupted):
    """A preemption's SIGTERM (SLURM, Kubernetes: every process of the job) under --save-every 0 saved nothing
    ("starts again at step 1") and exited 130. The ranks now agree at the next step boundary, save that step
    (backends/runner/graceful_stop.py), record it, and `train` exits 143; the next `train` resumes at the step
    after it, on the uninterrupted run's loss curve (the reference: the `uninterrupted` fixture, 8 steps)."""
    folder = emit(user, "signalled SIGTERM")
    command = [sys.executable, str(REPO_ROOT / "hardware_selector.py"), "train", str(folder), "--steps", "8",
               "--save-every", "0", "--no-record"]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=cpu_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if (folder / "metrics.jsonl").is_file() and '"kind": "train"' in (folder / "metrics.jsonl").read_text():
            break
        time.sleep(0.05)
    assert process.poll() is None, process.stderr.read().decode()[-2000:]  # training
    os.killpg(process.pid, signal.SIGTERM)  # a scheduler's preemption: the CLI, torchrun and every rank
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err.decode()[-3000:]  # 128 + SIGTERM
    _no_rank_survives(folder, within_s=60)
    saved = assert_interrupted_with_the_signals_checkpoint(folder, "SIGTERM")
    assert [row["step"] for row in rows(folder, "train")] == list(range(1, saved + 1))
    assert 1 <= saved < 8, saved  # stopped mid-run (a slower machine could reach the end first)
    (said,) = [line for line in err.decode().splitlines() if line.startswith(("interrupted:", "error:"))]
    assert said == "interrupted: " + json.loads((folder / "run_status.json").read_text())["message"]

    resumed = cli("train", folder, "--steps", "8", "--save-every", "0", "--no-record")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {folder / 'checkpoints' / f'global_step{saved}'} (step {saved};" in resumed.stdout
    assert [row["step"] for row in rows(folder, "train")] == list(range(1, 9))  # each step once
    assert [(row["step"], row["world_size"]) for row in rows(folder, "launch")] == [(0, 2), (saved, 2)]  # report's
    assert [row["loss"] for row in rows(folder, "train")] == pytest.approx(uninterrupted, rel=1e-6)


def assert_interrupted_with_the_signals_checkpoint(folder, name: str) -> int:
    """run_status.json records the signal, the step and the checkpoint the ranks saved at it, also under
    --save-every 0; the step saved."""
    status = json.loads((folder / "run_status.json").read_text())
    step = status["step"]
    checkpoint = folder / "checkpoints" / f"global_step{step}"
    then = f"checkpoint saved at step {step}: `hardware-selector train` resumes from {checkpoint}"
    assert status["state"] == "interrupted" and status["message"] == f"{name} at step {step}; {then}", status
    assert status["checkpoint"] == str(checkpoint) and (checkpoint / "runner_state.json").is_file()
    assert json.loads((checkpoint / "runner_state.json").read_text())["step"] == step
    return step
