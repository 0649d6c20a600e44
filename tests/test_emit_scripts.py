"""launch.sh and slurm.sbatch: valid bash, the exact command per launcher (mpiexec's too), and paths taken literally.

A fake interpreter records the argv it is started with, so the commands are
checked without starting any training; the run folder's name holds spaces,
quotes, `$`, backticks and `;` to prove nothing is split or executed.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from emit_plans import elastic_fsdp_plan, make_plan

from planner.emit.slurm import slurm_sbatch
from planner.launch_target import LaunchTarget
from planner.rundir.run_options import run_config as run_target
from planner.rundir.write import emit_run_folder

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


def _runner(run_dir: Path, caller: Path) -> list[str]:
    """The runner as launch.sh starts it when run from `caller` with _run_launch's arguments."""
    return [
        "-m",
        "backends.run",
        "--plan",
        str(run_dir.resolve()),
        "--launch-dir",
        str(caller),
        "--tiny",
        "--steps",
        "3",
    ]


def _run_launch(run_dir: Path, fake: Path, record: Path, **env: str) -> list[str]:
    environment = {**os.environ, "PYTHON": str(fake), "RECORD_FILE": str(record), **env}
    subprocess.run(
        ["bash", str(run_dir / "launch.sh"), "--tiny", "--steps", "3"],
        check=True,
        env=environment,
        cwd=run_dir.parent,
        timeout=60,
    )
    return _recorded(record)


def test_launch_commands_are_exact_and_quoted(tmp_path, recorder):
    """Every launcher starts the one runner module (the DeepSpeed launcher with its --module flag)."""
    record = tmp_path / "argv"
    ds_dir = tmp_path / HOSTILE_NAME
    emit_run_folder(make_plan(strategy="deepspeed", zero_stage=2), ds_dir)
    run = str(ds_dir.resolve())
    arguments = ["--plan", run, "--launch-dir", str(tmp_path), "--tiny", "--steps", "3"]  # _run_launch runs in tmp_path
    tail = ["-m", "backends.run", *arguments]
    assert subprocess.run(["bash", "-n", str(ds_dir / "launch.sh")]).returncode == 0

    assert _run_launch(ds_dir, recorder, record) == [
        "-m",
        "deepspeed.launcher.runner",
        "--num_gpus",
        "2",
        "--master_port",
        "29500",
        "--module",
        "backends.run",
        *arguments,
    ]
    # Three nodes need three hosts in the hostfile (the template lists the planned one); the template is put back.
    template = (ds_dir / "hostfile").read_text()
    (ds_dir / "hostfile").write_text("".join(f"host-{index} slots=2\n" for index in range(3)))
    assert _run_launch(ds_dir, recorder, record, NNODES="3", MASTER_ADDR="10.1.2.3") == [
        "-m",
        "deepspeed.launcher.runner",
        "--hostfile",
        f"{run}/hostfile",
        "--num_nodes",
        "3",
        "--num_gpus",
        "2",
        "--master_addr",
        "10.1.2.3",
        "--master_port",
        "29500",
        "--module",
        "backends.run",
        *arguments,
    ]
    (ds_dir / "hostfile").write_text(template)
    assert _run_launch(ds_dir, recorder, record, LAUNCHER="torchrun") == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        *tail,
    ]
    assert _run_launch(
        ds_dir,
        recorder,
        record,
        LAUNCHER="torchrun",
        NNODES="2",
        NODE_RANK="1",
        MASTER_ADDR="10.1.2.3",
        MASTER_PORT="2222",
    ) == [
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--node-rank=1",
        "--nproc-per-node=2",
        "--rdzv-backend=static",
        "--rdzv-id=hs-gpt2-deepspeed",
        "--rdzv-endpoint=10.1.2.3:2222",
        *tail,
    ]
    nodes = {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.1.2.4"}
    assert _run_launch(ds_dir, recorder, record, LAUNCHER="accelerate", **nodes) == [
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        f"{run}/accelerate_config.yaml",
        "--num_processes",
        "4",
        "--num_machines",
        "2",
        "--machine_rank",
        "1",
        "--main_process_ip",
        "10.1.2.4",
        "--main_process_port",
        "29500",
        *tail,
    ]
    # mpiexec starts every rank itself: the one beside the interpreter by default, or MPIEXEC with MPIEXEC_ARGS.
    (recorder.parent / "mpiexec").write_text(RECORDER)
    (recorder.parent / "mpiexec").chmod(0o755)
    assert _run_launch(ds_dir, recorder, record, LAUNCHER="mpirun") == ["-n", "2", str(recorder), *tail]
    mpirun = {"MPIEXEC": str(recorder), "MPIEXEC_ARGS": "-hostfile hosts  -ppn 2", "NNODES": "3"}
    assert _run_launch(ds_dir, recorder, record, LAUNCHER="mpirun", **mpirun) == [
        "-n", "6", "-hostfile", "hosts", "-ppn", "2", str(recorder), *tail,
    ]  # fmt: skip
    own = tmp_path / "my script's $dir" / "train me.py"
    assert _run_launch(ds_dir, recorder, record, LAUNCHER="torchrun", TRAIN_SCRIPT=str(own))[-6:] == [
        str(own),
        "--plan",
        run,
        "--tiny",
        "--steps",
        "3",
    ]
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    assert (ds_dir / "hostfile").read_text().splitlines()[1:] == ["node-1 slots=2"]


def test_engine_plans_launch_our_engine(tmp_path, recorder):
    run_dir = tmp_path / "engine run"
    emit_run_folder(make_plan(strategy="engine", tensor_parallel=2), run_dir)
    argv = _run_launch(run_dir, recorder, tmp_path / "argv")
    assert argv == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", *_runner(run_dir, tmp_path)]


FAKE_SLURM = {
    "scontrol": 'printf "node-a\\nnode-b\\n"\n',
    "hostname": 'echo "10.9.8.7 fe80::1"\n',
    # srun: drop srun's own options (and -w's value), run the command once, as task 0 of node 0.
    "srun": 'while [[ "$1" == -* ]]; do if [[ "$1" == -w ]]; then shift; fi; shift; done\nSLURM_NODEID=0 exec "$@"\n',
}


@pytest.mark.parametrize("strategy", ["deepspeed", "fsdp"])
def test_slurm_sbatch_rendezvous(strategy, tmp_path, recorder):
    """One task per node, torchrun's c10d rendezvous on the first node, the runner for every strategy."""
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
    runnable.write_text(slurm_sbatch(plan, run_target(plan), python=str(recorder)))
    record = tmp_path / "argv"
    env = {
        **os.environ,
        "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}",
        "RECORD_FILE": str(record),
        "SLURM_JOB_NODELIST": "node-[a-b]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_ID": "4242",
        "SLURM_SUBMIT_DIR": str(run_dir),  # submitted from the folder: the job's copy finds it there
    }
    subprocess.run(["bash", str(runnable)], check=True, env=env, timeout=60)
    run = str(run_dir.resolve())
    expected = [
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc-per-node=2",
        "--rdzv-id=4242",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=10.9.8.7:29500",
        "-m",
        "backends.run",
        "--plan",
        run,
        "--launch-dir",
        str(run_dir),  # SLURM_SUBMIT_DIR: relative paths passed to the runner are read from there
    ]
    assert _recorded(record) == expected
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


def test_an_elastic_folder_launches_torchrun_over_its_node_range(tmp_path, recorder):
    """launch.sh: the same c10d command on every node, --nnodes MIN:MAX and --max-restarts (overridable);
    slurm.sbatch: a MIN-MAX node allocation that survives a lost node (docs/running.md, "Elastic")."""
    plan, table = elastic_fsdp_plan()
    run_dir = tmp_path / HOSTILE_NAME
    emit_run_folder(plan, run_dir, elastic=table)
    tail = _runner(run_dir, tmp_path)
    rendezvous = ["--nproc-per-node=2", "--rdzv-backend=c10d", "--rdzv-id=hs-gpt2-fsdp"]
    record = tmp_path / "argv"
    assert _run_launch(run_dir, recorder, record, MASTER_ADDR="127.0.0.1") == [
        "-m", "torch.distributed.run", "--nnodes=1:2", "--max-restarts=3", *rendezvous,
        "--rdzv-endpoint=127.0.0.1:29500", *tail,
    ]  # fmt: skip
    assert _run_launch(run_dir, recorder, record, NNODES_RANGE="2:2", MAX_RESTARTS="0", MASTER_ADDR="10.1.2.3")[:4] == [
        "-m", "torch.distributed.run", "--nnodes=2:2", "--max-restarts=0",
    ]  # fmt: skip
    # NNODES=1 (one node here) starts the same command: the runner re-plans for the 2 processes torchrun gives it.
    assert _run_launch(run_dir, recorder, record, NNODES="1")[2] == "--nnodes=1:2"
    # Outside the range torchrun waited for nodes that never joined, then failed at its 600 s timeout: now one line.
    record.unlink()
    for nodes, node_range in (("1", "2:2"), ("3", "1:2")):
        environment = {**os.environ, "PYTHON": str(recorder), "RECORD_FILE": str(record), "NNODES": nodes,
                       "NNODES_RANGE": node_range}  # fmt: skip
        refused = subprocess.run(["bash", str(run_dir / "launch.sh")], env=environment, capture_output=True, text=True)
        low, high = node_range.split(":")
        assert (
            refused.returncode == 2
            and not record.exists()
            and refused.stderr
            == (
                f"launch.sh: NNODES={nodes} is outside this folder's elastic range {node_range} (nodes); start {low} to "
                f"{high} nodes, or re-emit the plan with an --elastic range that holds {nodes}\n"
            )
        )
    sbatch = (run_dir / "slurm.sbatch").read_text()
    assert subprocess.run(["bash", "-n", str(run_dir / "slurm.sbatch")]).returncode == 0
    assert "#SBATCH --nodes=1-2\n#SBATCH --no-kill\n" in sbatch and "--kill-on-bad-exit" not in sbatch
    assert '-m torch.distributed.run --nnodes=1:2 --max-restarts=3 --nproc-per-node="$NPROC_PER_NODE"' in sbatch


def test_launch_sh_advises_only_flags_the_commands_have(tmp_path, capsys, monkeypatch):
    """launch.sh said "re-emit with --nproc", a flag `plan` does not have; each flag it names must exist."""
    from hardware_selector_cli.app import main

    emit_run_folder(make_plan(strategy="ddp"), tmp_path / "run")
    script = (tmp_path / "run" / "launch.sh").read_text()
    advice = " ".join(line.lstrip("# ") for line in script.splitlines() if line.startswith("#"))
    monkeypatch.setenv("COLUMNS", "250")
    for command, pattern in (("plan", r"re-emit with (--[\w-]+)"), ("train", r"train RUN_DIR (--[\w-]+)")):
        flags = re.findall(pattern, advice)
        assert flags, (command, advice)
        assert main([command, "--help"]) == 0
        usage = capsys.readouterr().out
        for flag in flags:
            assert re.search(rf"{flag}\b", usage), f"launch.sh advises {command} {flag}, which it does not take"


@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.parametrize("target", [None, "torchrun", "slurm", "k8s", "skypilot", "mpi"])
def test_every_launcher_branch_finds_its_files(tmp_path, recorder, target, nodes):
    """Each of launch.sh's branches, run with the folder's own NNODES, names only files the folder holds (a
    --launcher slurm folder on two nodes had no hostfile for LAUNCHER=deepspeed)."""
    run_dir = tmp_path / "run"
    launch = None if target is None else LaunchTarget(target)  # type: ignore[arg-type]
    emit_run_folder(make_plan(strategy="fsdp", nodes=nodes), run_dir, launch=launch)
    (recorder.parent / "mpiexec").write_text(RECORDER)
    (recorder.parent / "mpiexec").chmod(0o755)
    prefix = f"{run_dir.resolve()}/"
    for launcher in ("torchrun", "accelerate", "deepspeed", "mpirun"):
        given = {"MASTER_ADDR": "10.1.2.3", "NODE_RANK": "0", "MPIEXEC_ARGS": "-hostfile mpi_hostfile"}
        argv = _run_launch(run_dir, recorder, tmp_path / "argv", LAUNCHER=launcher, **given)
        named = [arg for arg in argv if arg.startswith(prefix)]
        assert all(Path(arg).exists() for arg in named), (launcher, named)
        assert launcher != "deepspeed" or nodes == 1 or f"{prefix}hostfile" in named


@pytest.mark.parametrize(
    ("strategy", "target"), [("deepspeed", None), ("deepspeed", "slurm"), ("fsdp", None), ("fsdp", "mpi")]
)
def test_multi_node_instructions_follow_the_default_launcher(tmp_path, strategy, target):
    """README.md and launch.sh's header say to run launch.sh where its default LAUNCHER's own branch says: the
    first node only for the DeepSpeed launcher and mpiexec (they start the others), every node otherwise (a
    DeepSpeed folder's README said every node, starting the job once per node)."""
    launch = None if target is None else LaunchTarget(target)  # type: ignore[arg-type]
    run_dir = tmp_path / "run"
    emit_run_folder(make_plan(strategy=strategy, nodes=2), run_dir, launch=launch)
    script = (run_dir / "launch.sh").read_text()
    (default,) = re.findall(r"^LAUNCHER=\$\{LAUNCHER:-(\w+)\}$", script, re.M)
    branch = script.split(f"\n{default})\n", 1)[1].split(";;", 1)[0]  # the reference: the branch's own comment
    first_only = "first node only" in branch
    header = script.split("set -euo pipefail", 1)[0].split("# Several nodes:", 1)[1].split("\n# Your own", 1)[0]
    readme = (run_dir / "README.md").read_text()
    (readme_line,) = [line for line in readme.splitlines() if line.startswith("NNODES=") and "--tiny" not in line]
    for said in (header, readme_line):
        assert ("first node only" in said) == first_only, (default, said)
        assert ("every node" in said) == (not first_only), (default, said)
        assert ("NODE_RANK" in said) == (not first_only), (default, said)


def test_relative_paths_given_to_launch_sh_are_from_where_it_was_run(tmp_path, monkeypatch):
    """Found by a new user's audit (2026-11-30): the README's `TRAIN_SCRIPT=my_train.py bash runs/ft/launch.sh`
    failed (python could not open runs/ft/my_train.py) and `bash runs/ft/launch.sh --data data/x.jsonl` said no such
    file: the script starts its launcher in the run folder (mpiexec reads ./mpi_hostfile there). TRAIN_SCRIPT is
    made absolute from the caller's folder, and the runner gets that folder as an argument (--launch-dir: every
    launcher forwards arguments to every node) and works from it; slurm.sbatch passes the submit folder."""
    from backends.runner.launch_dir import enter_launch_dir

    fake = tmp_path / "py"
    fake.write_text(RECORDER + 'printf \'%s\\n\' "$PWD" > "$RECORD_FILE.where"\n')
    fake.chmod(0o755)
    run_dir, record, caller = tmp_path / "runs" / "ft", tmp_path / "argv", tmp_path / "work"
    caller.mkdir()
    emit_run_folder(make_plan(strategy="ddp"), run_dir)

    def launched(**env: str) -> list[str]:
        environment = {**os.environ, "PYTHON": str(fake), "RECORD_FILE": str(record), **env}
        subprocess.run(["bash", str(run_dir / "launch.sh"), "--data", "data/x.jsonl"], check=True, env=environment,
                       cwd=caller, timeout=60)  # fmt: skip
        return _recorded(record)

    run = str(run_dir.resolve())
    assert launched()[-7:] == ["backends.run", "--plan", run, "--launch-dir", str(caller), "--data", "data/x.jsonl"]
    own = launched(TRAIN_SCRIPT="my_train.py")  # your script: its path made whole, its arguments as given
    assert own[-5:] == [str(caller / "my_train.py"), "--plan", run, "--data", "data/x.jsonl"]
    assert (tmp_path / "argv.where").read_text().strip() == run  # the launcher itself still starts in RUN_DIR
    sbatch = (run_dir / "slurm.sbatch").read_text()
    assert sbatch.index('LAUNCH_DIR="${SLURM_SUBMIT_DIR:-$PWD}"') < sbatch.index('cd "$RUN_DIR"')
    assert '--plan "$RUN_DIR" --launch-dir "$LAUNCH_DIR" "$@"' in sbatch
    monkeypatch.chdir(run_dir)
    enter_launch_dir(caller)  # the runner's first step after its arguments: relative --data, --db, ... are the caller's
    assert Path.cwd() == caller
    enter_launch_dir(tmp_path / "not on this node")
    assert Path.cwd() == caller  # a folder this node lacks: left where the launcher put it


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("NNODES", "abc"),
        ("NNODES", "0"),
        ("NNODES", "08"),
        ("NODE_RANK", "-1"),
        ("MASTER_PORT", "x"),
        ("MASTER_PORT", "99999"),
    ],  # fmt: skip
)
def test_a_node_variable_that_is_no_whole_number_is_one_line(tmp_path, recorder, name, value):
    """`NNODES=abc bash launch.sh` ended in bash's "abc: unbound variable", exit 1 (a new user's audit); `08` in
    bash's octal error, exit 1 (a review)."""
    run_dir = tmp_path / "run"
    emit_run_folder(make_plan(strategy="ddp"), run_dir)
    environment = {**os.environ, "PYTHON": str(recorder), "RECORD_FILE": str(tmp_path / "argv"), name: value}
    done = subprocess.run(["bash", str(run_dir / "launch.sh")], env=environment, capture_output=True, text=True)
    what = {"NNODES": "a whole number of nodes, at least 1", "MASTER_PORT": "a port, 1 to 65535"}.get(
        name, "a whole number below a million"
    )
    assert (done.returncode, done.stderr) == (2, f"launch.sh: {name} must be {what}, not '{value}'\n")
    assert not (tmp_path / "argv").exists()
