"""A user fine-tunes their own checkpoint on their own text, as the README's quick start shows, on this CPU.

The README's block runs as printed: plan --emit with --data, then train,
then watch, then load final/: the evaluation loss falls, final/ loads with
`from_pretrained` and its eval loss equals the last one the run recorded. A
run killed mid-epoch and started again continues the uninterrupted run's
loss curve exactly, and metrics.jsonl holds each step once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts.demo_checkpoint import make_local_gpt2
from tests.distributed import REPO_ROOT, cpu_env
from tests.runner_reference import eval_loss_of

pytestmark = pytest.mark.slow


def cli(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "hardware_selector.py", *map(str, args)],
        cwd=REPO_ROOT,
        env=cpu_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


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


def readme_quick_start() -> str:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Fine-tune your checkpoint on your text") :]
    return section[section.index("```bash\n") + len("```bash\n") : section.index("```\n", section.index("```bash"))]


def test_the_readme_quick_start_runs_as_printed(tmp_path):
    """The README's four commands, in a fresh folder (the venv is this one; the scripts are the checkout's)."""
    script = readme_quick_start().replace(". .venv/bin/activate && ", "").replace("scripts/", f"{REPO_ROOT}/scripts/")
    (tmp_path / "quick_start.sh").write_text("set -euo pipefail\n" + script)
    env = cpu_env({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    completed = subprocess.run(
        ["bash", str(tmp_path / "quick_start.sh")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    run_dir = tmp_path / "runs" / "ft"
    evals = rows(run_dir, "eval")
    assert [row["step"] for row in evals] == [20, 40]
    before = eval_loss_of(tmp_path / "demo" / "my-gpt2", run_dir)  # the checkpoint as the user gave it
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"] < before  # it learns the user's text
    assert "finished" in completed.stdout and "eval" in completed.stdout  # what `watch` showed
    assert completed.stdout.strip().splitlines()[-1].isdigit()  # from_pretrained loaded final/

    # final/ is an HF folder: config, safetensors and the tokenizer; its eval loss is the last recorded one.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = run_dir / "final"
    assert AutoTokenizer.from_pretrained(final).eos_token == "<|endoftext|>"
    model = AutoModelForCausalLM.from_pretrained(final)
    assert model.lm_head.weight is model.transformer.wte.weight  # tied, as the checkpoint was
    assert eval_loss_of(final, run_dir) == pytest.approx(evals[-1]["eval_loss"], rel=1e-5)
    view = json.loads(
        subprocess.run(
            [sys.executable, "hardware_selector.py", "watch", str(run_dir), "--json"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    )
    assert (view["state"], view["step"], view["total_steps"]) == ("finished", 40, 40)


@pytest.fixture(scope="module")
def uninterrupted(user):
    whole = emit(user, "uninterrupted")
    assert cli("train", whole, "--steps", "8", "--save-every", "0").returncode == 0
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


def test_a_run_killed_mid_epoch_resumes_on_the_uninterrupted_curve(user, uninterrupted):
    killed = kill_after_checkpoint(user, "killed", 4)
    _no_rank_survives(killed)
    completed = cli("train", killed, "--steps", "8", "--save-every", "2")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "resuming from" in completed.stdout
    steps = [row["step"] for row in rows(killed, "train")]
    assert steps == list(range(1, 9))  # each step once, the killed run's extra rows dropped
    assert [row["loss"] for row in rows(killed, "train")] == pytest.approx(uninterrupted, rel=1e-6)


def test_a_checkpoint_resumes_on_another_number_of_processes_with_the_same_global_batch(user, uninterrupted):
    """Saved by 2 ranks (2 x micro-batch 4), continued by 1 (accumulation 2): the same samples each step."""
    killed = kill_after_checkpoint(user, "fewer processes", 2)
    completed = cli("train", killed, "--steps", "8", "--save-every", "2", "--nproc", "1")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "instead of the plan's 2: the global batch stays 8 with gradient accumulation 2" in completed.stdout
    assert [row["loss"] for row in rows(killed, "train")] == pytest.approx(uninterrupted, rel=1e-5)


def _no_rank_survives(run_dir) -> None:
    import psutil

    time.sleep(1.0)
    survivors = [p for p in psutil.process_iter(["cmdline"]) if str(run_dir) in " ".join(p.info["cmdline"] or [])]
    assert survivors == []
