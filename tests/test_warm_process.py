"""tests/warm_process.py against a fresh interpreter: a process forked from the warm server returns what
`subprocess.run([sys.executable, ...])` returns (exit code, stdout, stderr) under exactly the environment it
was given. The reference is the same probe (tests/engine_jobs/process_probe.py) started as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.distributed import REPO_ROOT, cpu_env
from tests.warm_process import run_python

PROBE = "tests/engine_jobs/process_probe.py"


def _both(*args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    warm = run_python([PROBE, *args], cwd=REPO_ROOT, env=env, timeout=120)
    cold = subprocess.run(
        [sys.executable, PROBE, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    return warm, cold


@pytest.mark.parametrize("how", [("exit", "0"), ("exit", "2"), ("os-exit", "3"), ("message",)])
def test_a_warm_process_returns_what_a_fresh_one_returns(how):
    env = {key: value for key, value in cpu_env({"PROBE_VARIABLE": "x"}).items() if key != "HARDWARE_SELECTOR_RECORD"}
    warm, cold = _both(*how, env=env)
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    seen = json.loads(warm.stdout)
    assert seen["argv"][1:] == list(how) and seen["cwd"] == str(REPO_ROOT) and seen["main"] == "__main__"
    assert (seen["PROBE_VARIABLE"], seen["HARDWARE_SELECTOR_RECORD"]) == ("x", "unset")


def test_an_uncaught_exception_is_a_traceback_and_exit_code_1():
    warm, cold = _both("raise", env=cpu_env())
    assert warm.returncode == cold.returncode == 1 and warm.stdout == cold.stdout
    for completed in (warm, cold):  # the frames above the probe's differ (runpy's), not what is said
        lines = completed.stderr.splitlines()
        assert lines[0] == "the probe's line on stderr" and lines[1] == "Traceback (most recent call last):"
        assert lines[-1] == "RuntimeError: the probe fails on purpose"


def test_what_a_warm_process_leaves_running_ends_with_it():
    completed = run_python([PROBE, "leave"], cwd=REPO_ROOT, env=cpu_env(), timeout=120)
    left = int(completed.stdout.splitlines()[0])
    deadline = time.monotonic() + 10
    while _alive(left) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(left)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
