"""A user fine-tunes their own checkpoint on their own text, as the README's quick start shows, on this CPU.

plan --emit with --data, then train, then watch, then load final/: the
evaluation loss falls, final/ loads with `from_pretrained` and its eval
loss equals the last one the run recorded. A run killed mid-epoch and
started again continues the uninterrupted run's loss curve exactly, and
metrics.jsonl holds each step once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.distributed import REPO_ROOT, cpu_env
from tests.local_model import make_local_gpt2
from tests.runner_reference import eval_loss_of

pytestmark = pytest.mark.slow


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "hardware_selector.py", *map(str, args)], cwd=REPO_ROOT, env=cpu_env(),
                          capture_output=True, text=True, timeout=timeout)


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
    completed = cli("plan", "-m", model_dir, "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "64",
                    "--global-batch", "8", "--strategies", "ddp", "--emit", run_dir, "--data", corpus, *extra)
    assert completed.returncode == 0, completed.stderr
    return run_dir


def test_quick_start_fine_tune_watch_and_load(user):
    root, model_dir, _ = user
    run_dir = emit(user, "quick start", "--lr", "2e-3")
    plan = json.loads((run_dir / "plan.json").read_text())["run"]
    assert plan["model"]["init"] == "pretrained" and plan["data"]["train"][0].endswith("corpus.txt")

    completed = cli("train", run_dir, "--steps", "40", "--eval-every", "20")
    assert completed.returncode == 0, completed.stderr[-3000:]
    evals = rows(run_dir, "eval")
    assert [row["step"] for row in evals] == [20, 40]
    before = eval_loss_of(model_dir, run_dir)  # the checkpoint as the user gave it
    assert evals[1]["eval_loss"] < evals[0]["eval_loss"] < before  # it learns the user's text

    watched = cli("watch", run_dir, "--json")
    view = json.loads(watched.stdout)
    assert (view["state"], view["step"], view["total_steps"]) == ("finished", 40, 40)
    assert view["eval"]["eval_loss"] == pytest.approx(evals[1]["eval_loss"])
    assert any("measured" in line for line in view["summary"])

    # final/ is an HF folder: config, safetensors and the tokenizer; its eval loss is the last recorded one.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = run_dir / "final"
    assert AutoTokenizer.from_pretrained(final).eos_token == "<|endoftext|>"
    model = AutoModelForCausalLM.from_pretrained(final)
    assert model.lm_head.weight is model.transformer.wte.weight  # tied, as the checkpoint was
    assert eval_loss_of(final, run_dir) == pytest.approx(evals[1]["eval_loss"], rel=1e-5)


def test_a_run_killed_mid_epoch_resumes_on_the_uninterrupted_curve(user):
    whole = emit(user, "uninterrupted")
    assert cli("train", whole, "--steps", "8", "--save-every", "0").returncode == 0
    reference = [row["loss"] for row in rows(whole, "train")]

    killed = emit(user, "killed")
    command = [sys.executable, "hardware_selector.py", "train", str(killed), "--steps", "8", "--save-every", "2"]
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=cpu_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and not (killed / "checkpoints" / "global_step4").is_dir():
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # the launcher and, through it, every rank
    process.wait()
    assert (killed / "checkpoints" / "global_step4").is_dir()
    _no_rank_survives(killed)

    completed = cli("train", killed, "--steps", "8", "--save-every", "2")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "resuming from" in completed.stdout
    steps = [row["step"] for row in rows(killed, "train")]
    assert steps == list(range(1, 9))  # each step once, the killed run's extra rows dropped
    assert [row["loss"] for row in rows(killed, "train")] == pytest.approx(reference, rel=1e-6)


def _no_rank_survives(run_dir) -> None:
    import psutil

    time.sleep(1.0)
    survivors = [p for p in psutil.process_iter(["cmdline"]) if str(run_dir) in " ".join(p.info["cmdline"] or [])]
    assert survivors == []
