"""Start a torchrun job with a timeout, and kill all of it when the time is up."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, Field

from benchmarks.harness.jobs import MeasureResult

REPO_ROOT = Path(__file__).resolve().parent.parent


class LaunchOutcome(BaseModel):
    """What one torchrun job left behind."""

    returncode: int | None  # None: killed at the timeout
    stderr_tail: str = ""
    results: dict[str, MeasureResult] = Field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kill_tree(pid: int) -> None:
    """Kill torchrun and its ranks: the ranks run in sessions of their own, so a process-group kill misses them."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(processes, timeout=10)


def run_torchrun_command(target: list[str], nproc: int, timeout_s: float) -> tuple[int | None, str]:
    """torchrun --nproc-per-node NPROC TARGET...; (exit code or None at the timeout, stderr)."""
    env = dict(os.environ)
    # One thread per rank unless told otherwise: the `cpu` pseudo-GPU is one core, and
    # more threads than cores thrash (badly, on a shared machine).
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        f"--master-port={free_port()}",
        *target,
    ]
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, stderr = process.communicate(timeout=timeout_s)
        return process.returncode, stderr
    except subprocess.TimeoutExpired:
        kill_tree(process.pid)
        _, stderr = process.communicate()
        return None, stderr
    except BaseException:  # Ctrl-C: the job is in its own session and would not see the signal
        kill_tree(process.pid)
        raise
