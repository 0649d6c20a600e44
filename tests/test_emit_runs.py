"""Every launch form of an emitted run folder runs the one runner and trains the same run (CPU, gloo, 2 processes).

launch.sh under torchrun (one node, and two "nodes" on the loopback), the
DeepSpeed launcher and `accelerate launch` all start `python -m backends.run`;
each must reproduce the single-process HF reference of the same checkpoint,
data and steps (tests/runner_reference.py). Under MPI's mpiexec (the [mpi]
extra's MPICH), whose ranks number themselves from MPI's environment, the same
plan must log the torchrun run's losses. The HF Trainer door (--trainer)
runs the folder's own training_args.json on the same blocks; its two runs
(DeepSpeed ZeRO-2, FSDP) follow the same data and update rule, so they agree
with each other (the runner as launch.sh's torchrun line starts it, its ranks
forked warm: the door is the subject there, not the launcher). The FSDP one
is stopped by a SIGTERM mid-run and resumed, as the runner's loop is in
tests/test_runner_finetune.py: the door checkpoints the step it stops at,
writes the runner's launch rows, and keeps the newest --keep-last checkpoints.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from benchmarks_db.store import BenchmarkStore
from planner.contract.run_config import DataConfig, Hyperparameters
from planner.rundir.write import RunOptions, emit_run_folder
from scripts.demo_checkpoint import make_local_gpt2
from tests.distributed import REPO_ROOT, cpu_env, free_port, run_torchrun
from tests.emit_plans import make_plan
from tests.runner_reference import hf_reference_losses

STEPS = 3
TRAINER_STEPS = 8  # the Trainer door's runs: room for a signal mid-run
TRAINER_RUN = ["--steps", str(TRAINER_STEPS), "--save-every", "2", "--keep-last", "2"]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    root = tmp_path_factory.mktemp("launch")
    model_dir, corpus = make_local_gpt2(root / "user")
    options = RunOptions(
        data=DataConfig(train=[str(corpus)]), optim=Hyperparameters(max_steps=STEPS, learning_rate=1e-3, warmup_steps=1)
    )
    return root, model_dir, options


def _emit(user, name: str, with_throughput: bool = False, **fields) -> Path:
    root, model_dir, options = user
    run_dir = root / name
    plan = make_plan(str(model_dir), seq_len=64, micro_batch=2, grad_accum=2, with_throughput=with_throughput, **fields)
    emit_run_folder(plan, run_dir, options=options)
    return run_dir


@pytest.fixture(scope="module")
def reference(user):
    return hf_reference_losses(_emit(user, "reference", strategy="ddp"), STEPS)


def _launch(run_dir: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    """bash launch.sh ...; returns rank 0's RUN_RESULT."""
    completed = subprocess.run(
        ["bash", str(run_dir / "launch.sh"), *args],
        env=cpu_env({"MASTER_PORT": str(free_port()), **(env or {})}),
        capture_output=True,
        text=True,
        timeout=400,
    )
    return _result(completed)


def _result(completed: subprocess.CompletedProcess) -> dict:
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RUN_RESULT ")]
    if completed.returncode != 0 or len(lines) != 1:
        raise AssertionError(
            f"exit {completed.returncode}\n--- stdout\n{completed.stdout[-4000:]}\n--- stderr\n"
            f"{completed.stderr[-6000:]}"
        )
    return json.loads(lines[0].removeprefix("RUN_RESULT "))


def _rows(run_dir: Path, kind: str) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if row["kind"] == kind]


def _losses(run_dir: Path) -> list[float]:
    return [row["loss"] for row in _rows(run_dir, "train")]


@pytest.fixture(scope="module")
def torchrun_ddp(user) -> tuple[dict, list[float], Path]:
    """The DDP folder trained by launch.sh under torchrun, one node of 2 ranks: (RUN_RESULT, losses, folder)."""
    run_dir = _emit(user, "ddp", strategy="ddp")
    return _launch(run_dir), _losses(run_dir), run_dir


def test_torchrun_one_node_and_two_nodes_on_the_loopback(user, reference, torchrun_ddp):
    result, losses, _ = torchrun_ddp
    assert (result["strategy"], result["world_size"], result["global_batch"]) == ("ddp", 2, 8)
    assert losses == pytest.approx(reference, rel=1e-4)

    nodes = _emit(user, "two nodes", strategy="ddp", gpus_per_node=1, nodes=2)
    port = str(free_port())
    command = ["bash", str(nodes / "launch.sh")]
    procs = [
        subprocess.Popen(
            command,
            env=cpu_env({"NODE_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [proc.communicate(timeout=400) for proc in procs]
    completed = [
        subprocess.CompletedProcess(command, proc.returncode, out, err) for proc, (out, err) in zip(procs, outputs)
    ]
    assert completed[1].returncode == 0, completed[1].stderr[-4000:]
    assert _result(completed[0])["world_size"] == 2
    assert _losses(nodes) == pytest.approx(reference, rel=1e-4)


def test_mpiexec_ranks_train_as_torchruns_do(user, torchrun_ddp):
    """LAUNCHER=mpirun: mpiexec starts both ranks; each takes its rank, world size and local rank from MPI's
    environment, meets the other over gloo, and the run logs the torchrun run's losses."""
    run_dir = _emit(user, "mpi", strategy="ddp")
    result = _launch(run_dir, env={"LAUNCHER": "mpirun"})
    assert (result["world_size"], result["global_batch"]) == (2, 8)
    assert _losses(run_dir) == pytest.approx(torchrun_ddp[1], rel=1e-6)


def test_deepspeed_launcher_and_accelerate_launch_start_the_runner(user, reference, tmp_path):
    extensions = tmp_path / "torch_extensions"
    zero2 = _emit(user, "zero2", strategy="deepspeed", zero_stage=2)
    result = _launch(zero2, env={"TORCH_EXTENSIONS_DIR": str(extensions)})  # the plan's launcher: deepspeed
    assert result["strategy"] == "deepspeed" and _losses(zero2) == pytest.approx(reference, rel=1e-4)
    assert not extensions.exists() or not any(extensions.iterdir())  # nothing was compiled

    fsdp = _emit(user, "fsdp", strategy="fsdp")
    result = _launch(fsdp, env={"LAUNCHER": "accelerate"})
    assert result["strategy"] == "fsdp" and _losses(fsdp) == pytest.approx(reference, rel=1e-4)


def _trainer_door(run_dir: Path, *flags: str) -> dict:
    """The door is the subject here, not launch.sh (tests/test_emit_scripts.py holds its torchrun line and the
    arguments it passes on): that line's runner in the folder, its ranks forked warm (tests/warm_launch.py)."""
    command = ["-m", "backends.run", "--plan", str(run_dir.resolve()), "--trainer", *flags]
    return _result(run_torchrun(command, nproc=2, timeout=400, cwd=run_dir))


def _sigterm_after_the_first_step(run_dir: Path, *flags: str) -> subprocess.CompletedProcess:
    """`hardware-selector train RUN_DIR --trainer FLAGS`, and a preemption's SIGTERM to it, torchrun and every rank
    once the first step is logged."""
    command = [sys.executable, str(REPO_ROOT / "hardware_selector.py"), "train", str(run_dir), "--trainer", *flags]
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=cpu_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    metrics, deadline = run_dir / "metrics.jsonl", time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if metrics.is_file() and '"kind": "train"' in metrics.read_text():
            break
        time.sleep(0.05)
    assert process.poll() is None, process.communicate()[1].decode()[-3000:]  # training
    os.killpg(process.pid, signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    return subprocess.CompletedProcess(command, process.returncode, out.decode(), err.decode())


def _launches(run_dir: Path) -> list[dict]:
    """metrics.jsonl's launch rows, but for the wall time."""
    return [{key: value for key, value in row.items() if key != "time"} for row in _rows(run_dir, "launch")]


def _kept(run_dir: Path) -> list[int]:
    return sorted(int(path.name.removeprefix("checkpoint-")) for path in (run_dir / "checkpoints-trainer").iterdir())


def test_hf_trainer_door_runs_deepspeed_and_fsdp_plans_and_a_sigterm_checkpoints_its_step(user, torchrun_ddp, tmp_path):
    """DeepSpeed ZeRO-2 runs through, over an earlier attempt's metrics.jsonl (before: appended to it); FSDP is
    stopped by a SIGTERM mid-run (before the door's vote: exit 143 and no checkpoint at the step it stopped at, no
    launch row), resumed, and resumed again from an older checkpoint --resume-from names. Same seed, same sampler,
    same update: the two backends log the same losses, the FSDP one across its three launches."""
    # The launch rows are the runner's own (its DDP run above is the reference): where each launch began.
    engine = _launches(torchrun_ddp[2])
    assert engine == [{"kind": "launch", "step": 0, "world_size": 2, "resumed_from": None}]

    # With the formula's estimate, as a searched plan has it: the record's prediction is then a number to compare.
    deepspeed = _emit(user, "trainer-deepspeed", with_throughput=True, strategy="deepspeed", zero_stage=2)
    earlier = '{"kind": "launch", "step": 0, "world_size": 1, "resumed_from": null}\n{"kind": "train", "step": 1}\n'
    (deepspeed / "metrics.jsonl").write_text(earlier)  # an attempt killed before its first checkpoint
    db = tmp_path / "runs.duckdb"
    elsewhere = tmp_path / "door-metrics.jsonl"  # --metrics, which the door dropped (it wrote the folder's)
    through = _trainer_door(
        deepspeed, "--steps", str(TRAINER_STEPS), "--record", "--db", str(db), "--metrics", str(elsewhere)
    )
    assert through["distributed_type"] == "DEEPSPEED" and through["steps"] == TRAINER_STEPS
    assert not (deepspeed / "metrics.jsonl").exists() and through["summary"]["metrics"] == str(elsewhere)
    os.replace(elsewhere, deepspeed / "metrics.jsonl")  # read below where the other runs' rows are
    # Every run calibrates: the runner's own summary, and its record beside the formula's step (before: neither).
    summary = json.loads((deepspeed / "run_summary.json").read_text())
    steps_s = [row["step_s"] for row in _rows(deepspeed, "train")]
    assert summary["steps"] == TRAINER_STEPS and summary["median_step_time_s"] == pytest.approx(
        statistics.median(steps_s[1:])  # the first step (start-up) left out, as the runner's loop leaves it
    )
    (stored,) = BenchmarkStore(db).runs()
    assert (stored.runner, stored.id) == ("backends.run --trainer", summary["record_id"])
    assert stored.step_time_median_s == pytest.approx(summary["median_step_time_s"])
    formula_step_s = json.loads((deepspeed / "plan.json").read_text())["throughput"]["step_time_s"]
    assert stored.predicted_step_time_s == summary["formula_step_time_s"] == pytest.approx(formula_step_s)
    (moved,) = (deepspeed / "previous").iterdir()  # a fresh start moves the earlier run aside, as the runner does
    assert (moved / "metrics.jsonl").read_text() == earlier
    assert _launches(deepspeed) == engine
    assert [row["step"] for row in _rows(deepspeed, "train")] == list(range(1, TRAINER_STEPS + 1))
    events = EventAccumulator(str(deepspeed / "tensorboard"))  # the loop's TensorBoard events too (before: none)
    events.Reload()
    losses = [row["loss"] for row in _rows(deepspeed, "train")]
    assert [(event.step, event.value) for event in events.Scalars("train/loss")] == [
        (step, pytest.approx(loss)) for step, loss in enumerate(losses, start=1)
    ]

    fsdp = _emit(user, "trainer-fsdp", strategy="fsdp")
    stopped = _sigterm_after_the_first_step(fsdp, *TRAINER_RUN)
    assert stopped.returncode == 143, stopped.stderr[-3000:]  # 128 + SIGTERM
    saved = _rows(fsdp, "train")[-1]["step"]  # the step the ranks stopped at
    assert 1 <= saved < TRAINER_STEPS, saved  # mid-run (a slower machine could reach the end first)
    checkpoint = fsdp / "checkpoints-trainer" / f"checkpoint-{saved}"
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == saved
    status = json.loads((fsdp / "run_status.json").read_text())  # said as the runner's loop says it
    then = f"checkpoint saved at step {saved}: `hardware-selector train --trainer` resumes from {checkpoint}"
    assert (status["state"], status["message"]) == ("interrupted", f"SIGTERM at step {saved}; {then}"), status
    (said,) = [line for line in stopped.stderr.splitlines() if line.startswith(("interrupted:", "error:"))]
    assert said == f"interrupted: {status['message']}"
    every, keep = 2, 2  # TRAINER_RUN's: the newest `keep` of the saves at every 2nd step and at the signal's step
    assert _kept(fsdp) == sorted({*range(every, saved + 1, every), saved})[-keep:]

    resumed = _trainer_door(fsdp, *TRAINER_RUN)
    assert resumed["distributed_type"] == "FSDP" and resumed["steps"] == TRAINER_STEPS
    for run_dir in (deepspeed, fsdp):
        assert (run_dir / "final" / "model.safetensors").is_file() and (run_dir / "final" / "tokenizer.json").is_file()
    assert [row["step"] for row in _rows(fsdp, "train")] == list(range(1, TRAINER_STEPS + 1))  # each step once
    assert [row["step"] for row in _rows(fsdp, "eval")] == [TRAINER_STEPS]  # the last evaluation, once
    assert json.loads((fsdp / "run_status.json").read_text())["state"] == "finished"
    assert resumed["losses"] == pytest.approx(through["losses"], rel=1e-4)
    assert _kept(fsdp) == sorted({*range(every, TRAINER_STEPS + 1, every), saved})[-keep:]
    assert _launches(fsdp) == [engine[0], {**engine[0], "step": saved, "resumed_from": str(checkpoint)}]

    # --resume-from names an older checkpoint than the newest (before: refused), and the curve goes on from it.
    older = _kept(fsdp)[0]
    named = _trainer_door(fsdp, *TRAINER_RUN, "--resume-from", f"checkpoints-trainer/checkpoint-{older}")
    assert named["losses"] == pytest.approx(through["losses"], rel=1e-4)
    assert [row["step"] for row in _rows(fsdp, "train")] == list(range(1, TRAINER_STEPS + 1))  # each step once
    older_path = str((fsdp / "checkpoints-trainer" / f"checkpoint-{older}").resolve())
    assert _launches(fsdp)[-1] == {**engine[0], "step": older, "resumed_from": older_path}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
