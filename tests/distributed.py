"""Run a module or script under torchrun from a test (CPU, gloo).

Every multi-rank test goes through `run_torchrun`, so port choice, timeouts
and the environment (no GPUs, few threads on a 2-core machine) are set once.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
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
            "DS_ACCELERATOR": "cpu",  # as launch.sh sets it for CPU plans (DeepSpeed would guess it, with a warning)
            "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")])),
        }
    )
    env.update(extra or {})
    return env


def warm_harness_launcher(cold: Callable) -> Callable:
    """The benchmark harness's launch (benchmarks/harness/processes.py `_run_launcher`) with its torchrun jobs
    started as run_torchrun starts them: warm ranks under torchrun's own agent where tests/warm_launch.py can,
    else `cold`; (exit code, or None at the timeout; stderr) as the harness returns them."""

    def launch(target: list[str], nproc: int, timeout_s: float, launcher: str, deadline) -> tuple[int | None, str]:
        from tests.warm_launch import can_start_warm, launch_warm

        env, base = cpu_env(), cpu_env()
        if launcher != "torchrun" or deadline is not None or not can_start_warm(env, base, None, target, REPO_ROOT):
            return cold(target, nproc, timeout_s, launcher, deadline)
        completed = launch_warm(target, nproc=nproc, timeout=timeout_s, cwd=REPO_ROOT, env=env, base=base)
        return (None if completed.returncode == -signal.SIGKILL else completed.returncode), completed.stderr

    return launch


def cli_in_process(*args: object) -> subprocess.CompletedProcess:
    """`hardware-selector ARGS` in this process, as its exit code and output: the CLI's imports (torch and
    transformers, for `train`'s checks) are paid once per test process instead of once per call. torchrun still
    runs the ranks apart; what they print to the inherited descriptors is captured too, after what the CLI
    printed itself, as a subprocess's output would be."""
    import contextlib
    import io
    import tempfile

    import hardware_selector

    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryFile() as child_out, tempfile.TemporaryFile() as child_err:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(child_out.fileno(), 1)
        os.dup2(child_err.fileno(), 2)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = hardware_selector.main([str(arg) for arg in args])
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        child_out.seek(0)
        child_err.seek(0)
        stdout = out.getvalue() + child_out.read().decode(errors="replace")
        stderr = err.getvalue() + child_err.read().decode(errors="replace")
    return subprocess.CompletedProcess(list(args), code, stdout, stderr)


def train_with_warm_ranks(run_dir: Path, *flags: object) -> subprocess.CompletedProcess:
    """`hardware-selector train RUN_DIR FLAGS` for a test whose subject is what the run does, not how `train`
    launches it: every check `train` makes, as `train --dry-run` makes them (in this process), then the very
    command it prints (its process count and the options it passes on to `python -m backends.run`) with the
    ranks forked warm under torchrun's own agent (run_torchrun) in this directory, as `train` runs it; a
    refusal is `train`'s one line and exit 2. What `train`'s own launch does (its lock, its log, its screen,
    Ctrl-C) stays with the tests that start it: the failing-rank, Ctrl-C, killed-launcher and full-disk ones."""
    import shlex

    checked = cli_in_process("train", run_dir, *flags, "--dry-run")
    if checked.returncode != 0:
        return checked
    *said, line = checked.stdout.splitlines()
    command = shlex.split(line)
    assert command[1:3] == ["-m", "torch.distributed.run"] and command[6:8] == ["-m", "backends.run"], command
    nproc = int(command[3].removeprefix("--nproc-per-node="))
    ran = run_torchrun(command[6:], nproc=nproc, cwd=Path.cwd())
    stdout = "".join(f"{note}\n" for note in said) + ran.stdout
    return subprocess.CompletedProcess(["train", run_dir, *flags], 0, stdout, checked.stderr + ran.stderr)


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
    failing test shows the ranks' tracebacks. The ranks fork from a warm interpreter under torchrun's own
    agent (tests/warm_launch.py) unless the job needs a cold start (its own torchrun options, or an
    import-time variable of its own); TESTS_COLD_LAUNCH=1 starts every job as `python -m torch.distributed.run`.
    """
    from tests.warm_launch import can_start_warm, launch_warm

    job_env, base = cpu_env(env), cpu_env()
    if can_start_warm(job_env, base, torchrun_args, target, cwd or REPO_ROOT):
        completed = launch_warm(target, nproc=nproc, timeout=timeout, cwd=cwd or REPO_ROOT, env=job_env, base=base)
    else:
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
            command, cwd=cwd or REPO_ROOT, env=job_env, capture_output=True, text=True, timeout=timeout
        )
    if completed.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, completed.args))} exited {completed.returncode}\n--- stdout\n{completed.stdout[-6000:]}"
            f"\n--- stderr\n{completed.stderr[-8000:]}"
        )
    return completed
