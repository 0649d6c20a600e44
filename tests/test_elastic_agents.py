"""Elastic through torchrun's own agents: two nodes on the loopback, one lost mid-run (docs/running.md, "Elastic").

Two launch.sh agents of an elastic folder (1 to 2 nodes of 2 processes) join one c10d rendezvous and train on
4 ranks. Once a checkpoint is written, the agent that does not host the rendezvous store (torchrun's c10d
store lives with the node at MASTER_ADDR, whose loss ends the job) is killed with its ranks (SIGKILL), as a
lost node would be. The agent left restarts its ranks (torchrun's --max-restarts), the rendezvous closes on the one node that
remains, and the runner re-plans for 2 ranks, resumes the checkpoint and trains to the end: the run's metrics
hold every step once, and the re-plan is in metrics.jsonl and plan.json's history. (tests/test_elastic.py
checks the numbers of such a resume against a single-process reference; this checks the agents' side.)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

import pytest

from benchmarks.harness.processes import free_port
from tests.distributed import cli_in_process as cli
from tests.distributed import cpu_env

pytestmark = pytest.mark.slow

STEPS = 24
# Rendezvous settings for a test: a lost node is noticed after 2 missed 1-second heartbeats, and a round closes
# 15 s after its first node joined, room for the second agent's start on a loaded machine (torchrun's defaults
# are 5 s x 3 and 30 s). torchrun reads PET_<option>.
RDZV_CONF = "last_call_timeout=15,keep_alive_interval=1,keep_alive_max_attempt=2,join_timeout=120"


def _agent(run_dir, port: int, log) -> subprocess.Popen:
    env = cpu_env(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "PET_RDZV_CONF": RDZV_CONF,
            "HARDWARE_SELECTOR_RECORD": "0",
        }
    )
    command = ["bash", str(run_dir / "launch.sh"), "--tiny", "--steps", str(STEPS), "--save-every", "4"]
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for_port(port: int, agent: subprocess.Popen, within_s: float = 60) -> None:
    deadline = time.monotonic() + within_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline and agent.poll() is None, "the first agent never opened its store"
            time.sleep(0.2)


def _checkpoints(run_dir) -> list[int]:
    folder = run_dir / "checkpoints"
    return (
        sorted(int(p.name.removeprefix("global_step")) for p in folder.glob("global_step*")) if folder.is_dir() else []
    )


def test_a_node_lost_mid_run_is_re_planned_and_the_run_ends_on_the_node_left(tmp_path):
    run_dir = tmp_path / "elastic"
    emitted = cli(
        "plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--nodes", "2", "--seq-len", "32",
        "--global-batch", "8", "--strategies", "fsdp", "--emit", run_dir, "--elastic", "1:2",
    )  # fmt: skip
    assert emitted.returncode == 0, emitted.stderr
    port = free_port()
    logs = [open(tmp_path / f"agent{index}.log", "w") for index in range(2)]  # noqa: SIM115 (closed below)
    # The first agent hosts the rendezvous store (the node at MASTER_ADDR); the node lost is the other one.
    kept = _agent(run_dir, port, logs[0])
    _wait_for_port(port, kept)
    lost = _agent(run_dir, port, logs[1])
    try:
        deadline = time.monotonic() + 480
        while not any(step >= 4 for step in _checkpoints(run_dir)):
            assert time.monotonic() < deadline and kept.poll() is None and lost.poll() is None, "no checkpoint"
            time.sleep(0.5)
        os.killpg(lost.pid, signal.SIGKILL)  # the node and its ranks, at once
        lost.wait()
        returncode = kept.wait(timeout=480)
    finally:
        for agent in (kept, lost):
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
        for log in logs:
            log.close()
    output = (tmp_path / "agent0.log").read_text()
    assert returncode == 0, output[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if row["kind"] == "train"] == list(range(1, STEPS + 1))
    (replan,) = [row for row in rows if row["kind"] == "replan"]
    assert (replan["from_world"], replan["to_world"]) == (4, 2) and replan["at_step"] >= 4
    history = json.loads((run_dir / "plan.json").read_text())["history"]
    assert [(entry["from_world"], entry["to_world"]) for entry in history] == [(4, 2)]
    assert "re-planned: 4 → 2 ranks" in output
