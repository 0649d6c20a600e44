"""Run a module or script under torchrun from a test (CPU, gloo).

Every multi-rank test goes through `run_torchrun`, so port choice, timeouts
and the environment (no GPUs, few threads on a 2-core machine) are set once.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": "",
            "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")])),
        }
    )
    env.update(extra or {})
    return env


def run_torchrun(
    target: list[str],
    *,
    nproc: int = 2,
    timeout: float = 300,
    cwd: Path | str | None = None,
    env: dict[str, str] | None = None,
    torchrun_args: list[str] | None = None,
) -> subprocess.CompletedProcess:
    """torchrun --nproc-per-node=N ... TARGET; target is ["-m", "pkg.mod", args...] or ["script.py", args...].

    Raises AssertionError with both output streams when the job fails, so a
    failing test shows the ranks' tracebacks.
    """
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        f"--master-port={free_port()}",
        *(torchrun_args or []),
        *target,
    ]
    completed = subprocess.run(
        command, cwd=cwd or REPO_ROOT, env=cpu_env(env), capture_output=True, text=True, timeout=timeout
    )
    if completed.returncode != 0:
        raise AssertionError(
            f"{' '.join(command)} exited {completed.returncode}\n--- stdout\n{completed.stdout[-6000:]}"
            f"\n--- stderr\n{completed.stderr[-8000:]}"
        )
    return completed
