"""Start a torchrun job with a timeout, and kill all of it when the time is up."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from benchmarks.harness.jobs import MeasureResult

REPO_ROOT = Path(__file__).resolve().parent.parent
POLL_S = 0.5  # how often a launch with a moving deadline asks for it again


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


LAUNCHERS = ("torchrun", "accelerate", "deepspeed")  # what `train`'s launch.sh starts the runner with


def launcher_command(launcher: str, target: list[str], nproc: int, port: int) -> list[str]:
    """One node's command that starts NPROC processes of `-m MODULE ARGS...` under `launcher`."""
    if target[0] != "-m":
        raise ValueError("the launch target is a module: -m MODULE ARGS...")
    module, args = target[1], target[2:]
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", f"--master-port={port}",
                "-m", module, *args]  # fmt: skip
    if launcher == "accelerate":  # its processes only: the runner sets the strategy up itself, as under launch.sh
        return [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(nproc), "--num_machines",
                "1", "--main_process_port", str(port), "--multi_gpu", "-m", module, *args]  # fmt: skip
    if launcher == "deepspeed":
        return [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", str(nproc), "--master_port",
                str(port), "--module", module, *args]  # fmt: skip
    raise ValueError(f"unknown launcher {launcher!r}; one of {', '.join(LAUNCHERS)}")


Deadline = Callable[[], float]  # the time.time() past which a launch is killed, asked again as it runs


def run_torchrun_command(
    target: list[str], nproc: int, timeout_s: float, launcher: str = "torchrun", deadline: Deadline | None = None
) -> tuple[int | None, str]:
    """`launcher` (torchrun unless told) starting NPROC processes of TARGET; (exit code or None at the timeout,
    stderr). deadline: kill it sooner, when that time passes (a benchmark matrix's launch gives each of its
    trials its own timeout, benchmarks/harness/trials.py). A free port can be taken by another process between
    our choosing it and the launcher binding it (EADDRINUSE): that launch is started once more on another port."""
    returncode, stderr = _run_launcher(target, nproc, timeout_s, launcher, deadline)
    if returncode and "EADDRINUSE" in stderr:
        returncode, stderr = _run_launcher(target, nproc, timeout_s, launcher, deadline)
    return returncode, stderr


def _run_launcher(
    target: list[str], nproc: int, timeout_s: float, launcher: str, deadline: Deadline | None
) -> tuple[int | None, str]:
    env = dict(os.environ)
    # One thread per rank unless told otherwise: the `cpu` pseudo-GPU is one core, and
    # more threads than cores thrash (badly, on a shared machine).
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    if launcher == "deepspeed" and (env.get("CUDA_VISIBLE_DEVICES") == "" or not Path("/dev/nvidiactl").exists()):
        env.setdefault("DS_ACCELERATOR", "cpu")  # no NVIDIA driver here: as launch.sh sets it for a CPU plan
    command = launcher_command(launcher, target, nproc, free_port())
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
        _, stderr = _communicate(process, timeout_s, deadline)
        return process.returncode, stderr
    except subprocess.TimeoutExpired:
        kill_tree(process.pid)
        _, stderr = process.communicate()
        return None, stderr
    except BaseException:  # Ctrl-C: the job is in its own session and would not see the signal
        kill_tree(process.pid)
        raise


def _communicate(process: subprocess.Popen, timeout_s: float, deadline: Deadline | None) -> tuple[str, str]:
    """Its output once it exits; TimeoutExpired after timeout_s or, sooner, once deadline() has passed. A retried
    communicate loses no output (subprocess's docs), so the moving deadline is asked every POLL_S."""
    if deadline is None:
        return process.communicate(timeout=timeout_s)
    cap = time.time() + timeout_s
    while True:
        left = min(cap, deadline()) - time.time()
        try:
            return process.communicate(timeout=max(0.0, min(left, POLL_S)))
        except subprocess.TimeoutExpired:
            if min(cap, deadline()) <= time.time():
                raise
