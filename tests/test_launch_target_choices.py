"""`plan --emit --launcher`: combinations that wrote files which do not do what they say.

--elastic with --launcher skypilot or mpi exited 0 and wrote a folder that is not elastic (a static torchrun
over SKYPILOT_NUM_NODES; a plain `mpiexec -n N` under a header saying "Elastic"): refused in one line, exit 2,
nothing written. --launcher k8s without --image wrote a placeholder image, said only in a YAML comment: the
folder is still written (docs/running.md, "Kubernetes"), with a warning line on stderr.
"""

from __future__ import annotations

import pytest

from planner.errors import UserInputError
from planner.launch_target import PLACEHOLDER_IMAGE, LaunchTarget
from planner.rundir.write import emit_run_folder
from tests.distributed import cli_in_process as cli
from tests.emit_plans import elastic_fsdp_plan

ELASTIC = ["-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--nodes", "2", "--seq-len", "32",
           "--global-batch", "8", "--strategies", "fsdp", "--elastic", "1:2"]  # fmt: skip


@pytest.mark.parametrize(
    ("target", "starts"), [("skypilot", "a fixed number of nodes"), ("mpi", "a fixed number of ranks (mpiexec)")]
)
def test_elastic_with_a_launcher_that_starts_a_fixed_node_count_is_refused(tmp_path, target, starts):
    run_dir = tmp_path / "run"
    completed = cli("plan", *ELASTIC, "--launcher", target, "--emit", run_dir)
    assert completed.returncode == 2 and not run_dir.exists(), completed.stderr
    assert completed.stderr == (
        "error: --elastic is for --launcher torchrun, slurm, k8s (torchrun over a node range, with restarts); "
        f"--launcher {target} starts {starts}: drop --elastic or pick one of those\n"
    )
    plan, table = elastic_fsdp_plan()  # the Python door too
    with pytest.raises(UserInputError, match="^--elastic is for --launcher torchrun, slurm, k8s"):
        emit_run_folder(plan, tmp_path / "api", elastic=table, launch=LaunchTarget(target))  # type: ignore[arg-type]
    assert not (tmp_path / "api").exists()


@pytest.mark.parametrize("target", ["torchrun", "slurm", "k8s"])
def test_elastic_with_a_launcher_that_honours_it_is_written(tmp_path, target):
    run_dir = tmp_path / "run"
    completed = cli("plan", *ELASTIC, "--launcher", target, "--emit", run_dir)
    assert completed.returncode == 0, completed.stderr
    assert "--rdzv-backend=c10d" in (run_dir / "launch.sh").read_text()


def test_k8s_without_an_image_is_written_with_a_warning_naming_image(tmp_path):
    run_dir = tmp_path / "run"
    base = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--launcher", "k8s"]
    completed = cli(*base, "--emit", run_dir)
    assert completed.returncode == 0, completed.stderr
    (warning,) = [line for line in completed.stderr.splitlines() if line.startswith("warning:")]
    assert warning == (
        f"warning: pytorchjob.yaml names the placeholder image {PLACEHOLDER_IMAGE}; re-emit with --image IMAGE (one "
        "with hardware-selector installed) or replace it in the file before kubectl create"
    )
    assert PLACEHOLDER_IMAGE in (run_dir / "pytorchjob.yaml").read_text()
    assert "replace the placeholder image" in (run_dir / "README.md").read_text()
    given = cli(*base, "--image", "ghcr.io/you/train:1.0", "--emit", tmp_path / "given")
    assert given.returncode == 0 and "warning:" not in given.stderr
    assert "placeholder" not in (tmp_path / "given" / "README.md").read_text()
