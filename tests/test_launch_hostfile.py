"""launch.sh's DeepSpeed branch on more nodes than its folder's hostfile lists (docs/running.md, "Launchers").

A folder planned for one node has no hostfile (or a one-line one); started with NNODES=2 LAUNCHER=deepspeed it
used to hand the DeepSpeed launcher a missing file. It refuses in one line, exit 2, before starting anything;
a hostfile the user writes with enough hosts is passed on.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from emit_plans import make_plan

from planner.rundir.write import emit_run_folder
from tests.test_emit_scripts import _run_launch, recorder  # noqa: F401  (recorder: the fake-interpreter fixture)


def _refusal(run_dir, fake, record, nodes: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHON": str(fake), "RECORD_FILE": str(record), "NNODES": nodes,
                   "LAUNCHER": "deepspeed"}  # fmt: skip
    return subprocess.run(
        ["bash", str(run_dir / "launch.sh")], env=environment, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("strategy", "hosts_said"), [("fsdp", "has no hostfile"), ("deepspeed", "its hostfile lists 1 host(s)")]
)
def test_deepspeed_on_more_nodes_than_the_hostfile_lists_is_one_line(tmp_path, recorder, strategy, hosts_said):  # noqa: F811
    run_dir = tmp_path / "run"
    emit_run_folder(
        make_plan(strategy=strategy, nodes=1, **({"zero_stage": 2} if strategy == "deepspeed" else {})), run_dir
    )
    record = tmp_path / "argv"
    result = _refusal(run_dir, recorder, record, "2")
    assert result.returncode == 2
    assert result.stderr == (
        f"launch.sh: NNODES=2, but this folder was planned for 1 node and {hosts_said}; the DeepSpeed launcher needs "
        f"one line per node: write {run_dir.resolve()}/hostfile (one 'HOST slots=2' line per node) or re-emit the "
        "plan with --nodes 2\n"
    )
    assert not record.exists()  # nothing was started


def test_a_hostfile_with_enough_hosts_is_passed_on(tmp_path, recorder):  # noqa: F811
    """Blank and comment lines are not hosts (DeepSpeed's launcher skips them); NNODES beyond the hosts refuses."""
    run_dir = tmp_path / "run"
    emit_run_folder(make_plan(strategy="fsdp", nodes=1), run_dir)
    (run_dir / "hostfile").write_text("# mine\nworker-a slots=2\n\n  # spare\nworker-b slots=2\n")
    argv = _run_launch(run_dir, recorder, tmp_path / "argv", NNODES="2", LAUNCHER="deepspeed")
    assert argv[:6] == [
        "-m",
        "deepspeed.launcher.runner",
        "--hostfile",
        f"{run_dir.resolve()}/hostfile",
        "--num_nodes",
        "2",
    ]
    refused = _refusal(run_dir, recorder, tmp_path / "argv3", "3")
    assert refused.returncode == 2
    assert "its hostfile lists 2 host(s)" in refused.stderr


def test_node_zeros_address_is_the_launchers_own_unless_given(tmp_path, recorder):  # noqa: F811
    """The one-node default MASTER_ADDR (127.0.0.1) used to reach DeepSpeed's launcher on several nodes, sending
    every other node to its own loopback. Unless MASTER_ADDR is given, no --master_addr is passed, and DeepSpeed's
    own parser (the reference) then leaves it empty, which makes its runner ask the first host for its address."""
    from deepspeed.launcher.runner import parse_args

    run_dir = tmp_path / "run"
    emit_run_folder(make_plan(strategy="fsdp", nodes=2), run_dir)
    not_given = _run_launch(run_dir, recorder, tmp_path / "argv", LAUNCHER="deepspeed")
    given = _run_launch(run_dir, recorder, tmp_path / "argv2", LAUNCHER="deepspeed", MASTER_ADDR="10.0.0.7")
    assert "--master_addr" not in not_given
    assert parse_args(not_given[2:]).master_addr == ""
    assert parse_args(given[2:]).master_addr == "10.0.0.7"
    assert [a for a in given if a != "--master_addr" and a != "10.0.0.7"] == not_given
