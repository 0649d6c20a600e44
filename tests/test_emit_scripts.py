"""launch.sh and slurm.sbatch: valid bash, the exact command per launcher, and paths taken literally.

A fake interpreter records the argv it is started with, so the commands are
checked without starting any training; the run folder's name holds spaces,
quotes, `$`, backticks and `;` to prove nothing is split or executed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from planner.emit import emit_run_folder
from planner.emit.launch_scripts import example_script_path
from planner.emit.slurm import slurm_sbatch
from planner.emit.target import run_target

from emit_plans import make_plan

HOSTILE_NAME = "run dir $HOME `touch pwned`; echo 'it''s' \"q\" $(touch pwned2)"

RECORDER = """#!/bin/bash
# Records its argv (NUL-separated) and the environment it matters for.
printf '%s\\0' "$@" > "$RECORD_FILE"
"""


@pytest.fixture()
def recorder(tmp_path):
    fake = tmp_path / "fake bin" / "py thon"
    fake.parent.mkdir()
    fake.write_text(RECORDER)
    fake.chmod(0o755)
    return fake


def _recorded(record: Path) -> list[str]:
    return record.read_bytes().decode().split("\0")[:-1]


def _run_launch(run_dir: Path, fake: Path, record: Path, **env: str) -> list[str]:
    environment = {**os.environ, "PYTHON": str(fake), "RECORD_FILE": str(record), **env}
    subprocess.run(["bash", str(run_dir / "launch.sh"), "--tiny", "--steps", "3"], check=True, env=environment,
                   cwd=run_dir.parent, timeout=60)
    return _recorded(record)


def test_launch_commands_are_exact_and_quoted(tmp_path, recorder):
    record = tmp_path / "argv"
    script = str(example_script_path())
    ds_dir = tmp_path / HOSTILE_NAME
    emit_run_folder(make_plan(strategy="deepspeed", zero_stage=2), ds_dir)
    run = str(ds_dir.resolve())
    tail = [script, "--plan", run, "--tiny", "--steps", "3"]
    assert subprocess.run(["bash", "-n", str(ds_dir / "launch.sh")]).returncode == 0

    assert _run_launch(ds_dir, recorder, record) == [
        "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", "29500", *tail]
    assert _run_launch(ds_dir, recorder, record, NNODES="3", MASTER_ADDR="10.1.2.3") == [
        "-m", "deepspeed.launcher.runner", "--hostfile", f"{run}/hostfile", "--num_nodes", "3", "--num_gpus", "2",
        "--master_addr", "10.1.2.3", "--master_port", "29500", *tail]
    assert _run_launch(ds_dir, recorder, record, LAUNCHER="torchrun") == [
        "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", *tail]
    assert _run_launch(ds_dir, recorder, record, LAUNCHER="torchrun", NNODES="2", NODE_RANK="1",
                       MASTER_ADDR="10.1.2.3", MASTER_PORT="2222") == [
        "-m", "torch.distributed.run", "--nnodes=2", "--node-rank=1", "--nproc-per-node=2", "--rdzv-backend=static",
        "--rdzv-id=hs-gpt2-deepspeed", "--rdzv-endpoint=10.1.2.3:2222", *tail]
    assert _run_launch(ds_dir, recorder, record, LAUNCHER="accelerate", NNODES="2", NODE_RANK="1") == [
        "-m", "accelerate.commands.launch", "--config_file", f"{run}/accelerate_config.yaml", "--num_processes", "4",
        "--num_machines", "2", "--machine_rank", "1", "--main_process_ip", "127.0.0.1", "--main_process_port",
        "29500", *tail]
    own = tmp_path / "my script's $dir" / "train me.py"
    assert _run_launch(ds_dir, recorder, record, LAUNCHER="torchrun", TRAIN_SCRIPT=str(own))[-6:] == [
        str(own), "--plan", run, "--tiny", "--steps", "3"]
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    assert (ds_dir / "hostfile").read_text().splitlines()[1:] == ["node-1 slots=2"]


def test_engine_plans_launch_our_engine(tmp_path, recorder):
    run_dir = tmp_path / "engine run"
    emit_run_folder(make_plan(strategy="engine", tensor_parallel=2), run_dir)
    argv = _run_launch(run_dir, recorder, tmp_path / "argv")
    assert argv == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "backends.run",
                    "--plan", str(run_dir.resolve()), "--tiny", "--steps", "3"]


FAKE_SLURM = {
    "scontrol": 'printf "node-a\\nnode-b\\n"\n',
    "hostname": 'echo "10.9.8.7 fe80::1"\n',
    # srun: drop srun's own options (and -w's value), run the command once, as task 0 of node 0.
    "srun": 'while [[ "$1" == -* ]]; do if [[ "$1" == -w ]]; then shift; fi; shift; done\n'
            'SLURM_NODEID=0 exec "$@"\n',
}


@pytest.mark.parametrize("strategy", ["deepspeed", "fsdp"])
def test_slurm_sbatch_rendezvous(strategy, tmp_path, recorder):
    plan = make_plan(strategy=strategy, nodes=2, **({"zero_stage": 3} if strategy == "deepspeed" else {}))
    run_dir = tmp_path / HOSTILE_NAME
    emit_run_folder(plan, run_dir)
    sbatch = run_dir / "slurm.sbatch"
    assert subprocess.run(["bash", "-n", str(sbatch)]).returncode == 0
    text = sbatch.read_text()
    assert "#SBATCH --nodes=2" in text and "#SBATCH --ntasks-per-node=1" in text
    assert 'mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")\nHEAD_NODE="${NODES[0]}"' in text
    assert 'export MASTER_ADDR="$HEAD_NODE_IP"' in text

    # Run it with stand-ins for the SLURM tools and a recording interpreter.
    fake_bin = tmp_path / "slurm bin"
    fake_bin.mkdir()
    for name, body in FAKE_SLURM.items():
        (fake_bin / name).write_text("#!/bin/bash\n" + body)
        (fake_bin / name).chmod(0o755)
    runnable = tmp_path / "job.sbatch"
    runnable.write_text(slurm_sbatch(plan, run_target(plan), run_dir.resolve(), python=str(recorder)))
    record = tmp_path / "argv"
    env = {**os.environ, "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "RECORD_FILE": str(record),
           "SLURM_JOB_NODELIST": "node-[a-b]", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_ID": "4242"}
    subprocess.run(["bash", str(runnable)], check=True, env=env, timeout=60)
    run, script = str(run_dir.resolve()), str(example_script_path())
    if strategy == "fsdp":
        expected = ["-m", "accelerate.commands.launch", "--config_file", f"{run}/accelerate_config.yaml",
                    "--num_processes", "4", "--num_machines", "2", "--machine_rank", "0",
                    "--main_process_ip", "10.9.8.7", "--main_process_port", "29500", script, "--plan", run]
    else:
        expected = ["-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2", "--rdzv-id=4242",
                    "--rdzv-backend=c10d", "--rdzv-endpoint=10.9.8.7:29500", script, "--plan", run]
    assert _recorded(record) == expected
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


def test_plan_json_round_trips(tmp_path):
    from planner.emit.plan_json import read_plan_file

    plan = make_plan(strategy="fsdp")
    written = plan.emit(tmp_path / "run")  # Plan.emit is emit_run_folder
    assert {path.name for path in written} == {path.name for path in (tmp_path / "run").iterdir()}
    text = (tmp_path / "run" / "plan.json").read_text()
    again, target = read_plan_file(text)
    assert again == plan and target == run_target(plan)
    document = json.loads(text)
    assert document["schema_version"] == 1 and document["plan_file_schema_version"] == 1
    assert document["estimate_sources"]["memory"]["activations"].startswith("formula:")


def test_train_script_refuses_bad_input(tmp_path):
    """One line, exit code 2: no launcher, or no run folder."""
    import sys

    script = str(example_script_path())
    env = {key: value for key, value in os.environ.items() if key != "WORLD_SIZE"}
    for extra_env, plan_dir, expected in (({}, tmp_path, "through a launcher"),
                                          ({"WORLD_SIZE": "1"}, tmp_path / "missing", "plan.json not found")):
        completed = subprocess.run([sys.executable, script, "--plan", str(plan_dir)], env={**env, **extra_env},
                                   capture_output=True, text=True, timeout=120)
        assert completed.returncode == 2 and expected in completed.stderr
        assert len(completed.stderr.strip().splitlines()) == 1
