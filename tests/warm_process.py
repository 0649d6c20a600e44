"""`python TARGET` as one process forked from the warm server (tests/warm_launch.py), for the tests whose subject
is what a single process started without a launcher does: its exit code, its stdout and stderr, and the
environment it was given (a variable unset included).

Why: a fresh `python -m backends.run` spends 2 to 5 s of CPU importing torch, transformers and our runner
before it refuses a folder or trains a few steps; the warm server has imported them already. `run_python`
returns what `subprocess.run([sys.executable, *target], cwd=..., env=..., capture_output=True, text=True,
timeout=...)` returns, and raises subprocess.TimeoutExpired as it would.

What keeps it faithful: the process takes exactly `env` as its environment, `cwd` as its directory and the
command line as sys.argv, and runs the module or script as `__main__` (tests.warm_launch.run_as_main); its
stdout and stderr are files of its own (descriptors 1 and 2); an uncaught exception prints Python's traceback
and exits 1; `os._exit(code)` or SystemExit is the exit code; it leads a process group of its own, which
ends with it. A job that tests.warm_launch.can_start_warm would start cold (an import-time variable of its
own, another copy of our packages on its path, TESTS_COLD_LAUNCH=1) runs as that subprocess.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

from tests.distributed import cpu_env
from tests.warm_launch import _start_server, can_start_warm, run_as_main


def _process_main(target: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    os.setpgid(0, 0)
    for fd, name in ((1, out), (2, err)):
        file = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(file, fd)
        os.close(file)
    try:
        code = run_as_main(target, cwd, env)
    except BaseException:  # noqa: BLE001 (what the interpreter does with an uncaught exception)
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_python(
    target: list[str], *, cwd: Path | str, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess:
    """`python TARGET` (["-m", module, args...] or [script, args...]) in `cwd` under exactly `env`."""
    command = [sys.executable, *target]
    base = cpu_env()
    if not can_start_warm(env, base, None, target, cwd):
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    _start_server(base)
    with tempfile.TemporaryDirectory(prefix="warm-process-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        process = multiprocessing.get_context("forkserver").Process(
            target=_process_main, args=(list(target), str(cwd), dict(env), str(out), str(err))
        )
        process.start()
        process.join(timeout)
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the process, if it timed out, and whatever it left behind
        except ProcessLookupError:
            pass
        timed_out = process.exitcode is None
        process.join()
        stdout, stderr = (path.read_text(errors="replace") if path.exists() else "" for path in (out, err))
    if timed_out:
        raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
    assert process.exitcode is not None
    return subprocess.CompletedProcess(command, process.exitcode, stdout, stderr)
