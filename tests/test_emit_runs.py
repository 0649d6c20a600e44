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
forked warm: the door is the subject there, not the launcher).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner.contract.run_config import DataConfig, Hyperparameters
from planner.rundir.write import RunOptions, emit_run_folder
from scripts.demo_checkpoint import make_local_gpt2
from tests.distributed import cpu_env, free_port, run_torchrun
from tests.emit_plans import make_plan
from tests.runner_reference import hf_reference_losses

STEPS = 3
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    root = tmp_path_factory.mktemp("launch")
    model_dir, corpus = make_local_gpt2(root / "user")
    options = RunOptions(
        data=DataConfig(train=[str(corpus)]), optim=Hyperparameters(max_steps=STEPS, learning_rate=1e-3, warmup_steps=1)
    )
    return root, model_dir, options


def _emit(user, name: str, **fields) -> Path:
    root, model_dir, options = user
    run_dir = root / name
    emit_run_folder(
        make_plan(str(model_dir), seq_len=64, micro_batch=2, grad_accum=2, **fields), run_dir, options=options
    )
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


def _losses(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row["loss"] for row in rows if row["kind"] == "train"]


@pytest.fixture(scope="module")
def torchrun_ddp(user) -> tuple[dict, list[float]]:
    """The DDP folder trained by launch.sh under torchrun, one node of 2 ranks: (RUN_RESULT, losses)."""
    run_dir = _emit(user, "ddp", strategy="ddp")
    return _launch(run_dir), _losses(run_dir)


def test_torchrun_one_node_and_two_nodes_on_the_loopback(user, reference, torchrun_ddp):
    result, losses = torchrun_ddp
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


def test_hf_trainer_door_runs_deepspeed_and_fsdp_plans(user):
    results = {}
    for name, fields in (
        ("trainer-deepspeed", {"strategy": "deepspeed", "zero_stage": 2}),
        ("trainer-fsdp", {"strategy": "fsdp"}),
    ):
        run_dir = _emit(user, name, **fields)
        # The door is the subject here, not launch.sh (tests/test_emit_scripts.py holds its torchrun line and the
        # arguments it passes on): that line's runner in the folder, its ranks forked warm (tests/warm_launch.py).
        command = ["-m", "backends.run", "--plan", str(run_dir.resolve()), "--trainer"]
        results[name] = _result(run_torchrun(command, nproc=2, timeout=400, cwd=run_dir))
        assert results[name]["steps"] == STEPS and results[name]["world_size"] == 2
        assert (run_dir / "final" / "model.safetensors").is_file() and (run_dir / "final" / "tokenizer.json").is_file()
    assert results["trainer-deepspeed"]["distributed_type"] == "DEEPSPEED"
    assert results["trainer-fsdp"]["distributed_type"] == "FSDP"
    # Same seed, same sampler, same update: the two backends log the same losses.
    assert results["trainer-deepspeed"]["losses"] == pytest.approx(results["trainer-fsdp"]["losses"], rel=1e-4)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
