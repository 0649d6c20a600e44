"""launch.sh on several nodes: a start that would wait silently for nodes that never join is one line, exit 2.

A two-node folder's README said `bash launch.sh   # this node`, and launch.sh then ran torchrun's static
rendezvous at its own loopback as node 0, waiting with no output for a second node. Each case runs the emitted
script with bash and a recording interpreter (as tests/test_emit_scripts.py does): a refusal starts nothing.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from emit_plans import elastic_fsdp_plan, make_plan

from planner.launch_target import LaunchTarget
from planner.rundir.write import emit_run_folder
from tests.test_emit_scripts import RECORDER


@pytest.fixture()
def interpreter(tmp_path) -> Path:
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(RECORDER)
    fake.chmod(0o755)
    (fake.parent / "mpiexec").write_text(RECORDER)  # the mpiexec launch.sh finds beside the interpreter
    (fake.parent / "mpiexec").chmod(0o755)
    return fake


def _launch(run_dir: Path, fake: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str] | None]:
    """Run launch.sh with only the given variables of its own; (the process, the argv it started or None)."""
    record = run_dir.parent / "argv"
    record.unlink(missing_ok=True)
    ours = ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "LAUNCHER", "MPIEXEC", "MPIEXEC_ARGS")
    base = {k: v for k, v in os.environ.items() if k not in ours and not k.startswith(("SLURM_", "PBS_"))}
    environment = {**base, "PYTHON": str(fake), "RECORD_FILE": str(record), **env}
    done = subprocess.run(
        ["bash", str(run_dir / "launch.sh"), "--tiny", "--steps", "1"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, record.read_bytes().decode().split("\0")[:-1] if record.exists() else None


def _emit(tmp_path: Path, nodes: int = 2, **kwargs) -> Path:
    run_dir = tmp_path / "run"
    emit_run_folder(make_plan(strategy="ddp", gpus_per_node=1, nodes=nodes), run_dir, **kwargs)
    return run_dir


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({}, "MASTER_ADDR and NODE_RANK"),
        ({"MASTER_ADDR": "10.0.0.1"}, "NODE_RANK"),
        ({"NODE_RANK": "1"}, "MASTER_ADDR"),
    ],
)
def test_several_nodes_without_node_0s_address_or_this_nodes_rank_are_refused(
    tmp_path, interpreter, launcher, given, missing
):
    run_dir = _emit(tmp_path)
    done, argv = _launch(run_dir, interpreter, LAUNCHER=launcher, **given)
    assert (done.returncode, argv) == (2, None), done.stderr
    assert done.stderr == (
        f"launch.sh: NNODES=2 needs {missing}: run MASTER_ADDR=<node 0's address> NODE_RANK=<0..1> bash launch.sh "
        "on each of the 2 nodes, or NNODES=1 bash launch.sh to train on this node alone\n"
    )


def test_a_rank_outside_the_nodes_is_refused(tmp_path, interpreter):
    done, argv = _launch(_emit(tmp_path), interpreter, MASTER_ADDR="10.0.0.1", NODE_RANK="2")
    assert (done.returncode, argv) == (2, None)
    assert (
        done.stderr == "launch.sh: NODE_RANK=2 is not a node of NNODES=2; give 0 to 1, 0 on the node at MASTER_ADDR\n"
    )


def test_given_both_each_node_says_what_it_waits_for_and_starts(tmp_path, interpreter):
    run_dir = _emit(tmp_path)
    done, argv = _launch(run_dir, interpreter, MASTER_ADDR="10.0.0.1", NODE_RANK="1", MASTER_PORT="2222")
    assert done.returncode == 0 and argv is not None, done.stderr
    assert done.stderr == "launch.sh: waiting for all 2 nodes at 10.0.0.1:2222 (this is node 1)\n"
    assert "--node-rank=1" in argv and "--rdzv-endpoint=10.0.0.1:2222" in argv
    # The loopback given on purpose (two agents on one machine, as tests/test_emit_runs.py runs them) is kept.
    done, argv = _launch(run_dir, interpreter, MASTER_ADDR="127.0.0.1", NODE_RANK="0")
    assert done.returncode == 0 and "--rdzv-endpoint=127.0.0.1:29500" in (argv or [])


def test_the_readme_and_header_say_how_to_start_one_node_of_a_multi_node_folder(tmp_path, interpreter):
    run_dir = _emit(tmp_path)
    readme = (run_dir / "README.md").read_text()
    commands = readme.split("## How to run", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert not any(line.startswith("bash launch.sh ") for line in commands), commands  # it would wait or refuse
    (smoke,) = [line for line in commands if "--tiny" in line]
    assert smoke.startswith("NNODES=1 bash launch.sh --tiny --steps 3 ")
    assert "# One node:       NNODES=1 bash launch.sh " in (run_dir / "launch.sh").read_text()
    done, argv = _launch(run_dir, interpreter, NNODES="1")
    assert done.returncode == 0 and argv is not None and argv[:3] == ["-m", "torch.distributed.run", "--standalone"]
    assert done.stderr == ""
    # A one-node folder keeps its plain line.
    one = _emit(tmp_path / "one", nodes=1)
    assert "\nbash launch.sh                 # this node\n" in (one / "README.md").read_text()


def test_an_elastic_folder_on_several_nodes_needs_the_rendezvous_address(tmp_path, interpreter):
    plan, table = elastic_fsdp_plan()
    run_dir = tmp_path / "run"
    emit_run_folder(plan, run_dir, elastic=table)
    done, argv = _launch(run_dir, interpreter)
    assert (done.returncode, argv) == (2, None)
    assert done.stderr.startswith("launch.sh: NNODES=2 needs MASTER_ADDR: run MASTER_ADDR=<node 0's address> bash")
    done, argv = _launch(run_dir, interpreter, MASTER_ADDR="10.0.0.1")  # torchrun numbers the nodes itself
    assert done.returncode == 0 and "--rdzv-endpoint=10.0.0.1:29500" in (argv or [])
    assert done.stderr == "launch.sh: waiting for 1 to 2 nodes at 10.0.0.1:29500\n"
    done, argv = _launch(run_dir, interpreter, NNODES="1")  # one machine: the loopback, as docs/running.md says
    assert done.returncode == 0 and argv is not None


def test_mpiexec_on_several_nodes_needs_to_be_told_the_nodes(tmp_path, interpreter):
    """An mpi folder's default ran `mpiexec -n 16` on the one node it was started on."""
    run_dir = _emit(tmp_path, launch=LaunchTarget("mpi"))
    done, argv = _launch(run_dir, interpreter)
    assert (done.returncode, argv) == (2, None)
    assert done.stderr == (
        "launch.sh: NNODES=2 needs mpiexec told your nodes, or it starts all 2 processes here: on the first node run "
        "MPIEXEC_ARGS='-hostfile mpi_hostfile' bash launch.sh with mpi_hostfile listing each node as HOST:1 (Open "
        "MPI: HOST slots=1), or NNODES=1 bash launch.sh for this node alone\n"
    )
    for told in ({"MPIEXEC_ARGS": "-hostfile mpi_hostfile"}, {"SLURM_JOB_NODELIST": "node-[1-2]"}):
        done, argv = _launch(run_dir, interpreter, **told)
        assert done.returncode == 0 and argv is not None and argv[:2] == ["-n", "2"], (told, done.stderr)
    done, argv = _launch(run_dir, interpreter, NNODES="1")
    assert done.returncode == 0 and argv is not None and argv[:2] == ["-n", "1"]


def test_the_mpi_hostfile_is_one_mpich_reads_and_the_deepspeed_hostfile_stays(tmp_path):
    """The folder's only hostfile was DeepSpeed's (`node-1 slots=8`), which MPICH refuses ("token slots not
    supported"). mpi_hostfile, its names replaced by this machine's, runs under the bundled MPICH."""
    import sys

    run_dir = _emit(tmp_path, launch=LaunchTarget("mpi"))
    assert (run_dir / "hostfile").read_text().splitlines()[1:] == ["node-1 slots=1", "node-2 slots=1"]
    hosts = (run_dir / "mpi_hostfile").read_text()
    assert [line for line in hosts.splitlines() if not line.startswith("#")] == ["node-1:1", "node-2:1"]
    assert "mpi_hostfile" in (run_dir / "README.md").read_text()
    mpiexec = Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists():
        pytest.skip("no MPICH beside the interpreter (the [mpi] extra)")
    (tmp_path / "local").write_text(hosts.replace("node-1", "localhost").replace("node-2", "localhost"))
    ran = subprocess.run(
        [str(mpiexec), "-hostfile", str(tmp_path / "local"), "-n", "2", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    # A one-node folder of another launcher has none (LAUNCHER=mpirun on one node needs no hosts).
    assert not (_emit(tmp_path / "one", nodes=1) / "mpi_hostfile").exists()


@pytest.mark.parametrize("target", [None, "mpi"])
def test_every_launch_sh_line_of_a_multi_node_readme_starts(tmp_path, interpreter, target):
    """The README's commands, placeholders filled in (node 0, its address), run as written: none refuses."""
    run_dir = _emit(tmp_path, launch=None if target is None else LaunchTarget(target))  # type: ignore[arg-type]
    readme = (run_dir / "README.md").read_text()
    block = readme.split("## How to run", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines() if "bash launch.sh" in line]
    assert len(lines) >= 3
    for line in lines:
        if line.startswith("TRAIN_SCRIPT="):  # "on several nodes with the variables above"
            line = line.replace("TRAIN_SCRIPT=my_train.py bash launch.sh", lines[0])
        filled = line.replace("<i>", "0").replace("<first node>", "10.0.0.1")
        assignments, _ = filled.split("bash launch.sh", 1)
        given = dict(word.split("=", 1) for word in shlex.split(assignments))
        done, argv = _launch(run_dir, interpreter, **given)
        assert done.returncode == 0 and argv is not None, (line, done.stderr)
