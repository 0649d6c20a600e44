"""Run torchrun for `train`, keep its report in the run folder's log, and end a failure in one line.

The runner's ranks already say what went wrong in one line (backends/run.py);
what a failed job adds on top is torchrun's own report: a Python traceback
of the launcher and a table of failed ranks. That report (and everything
the job writes to stderr) goes to RUN_DIR/logs/train-<time>.log; on the
screen the run's output appears as it comes, up to the first line of the
launcher's report. When no rank explained the failure (a rank killed by a
signal, say), one line says how it ended and where the log is. A stop signal
to the CLI (Ctrl-C, SIGTERM) stops torchrun and is remembered, so that what
follows is reported as the interruption it is (train.py).

torchrun starts in the user's folder, so a relative path on the command line
(`--data other.txt`) means what it means where the user stands, with the
project on PYTHONPATH for `-m backends.run`; and it dies with the CLI (Linux's
parent-death signal), so a killed `train` never leaves ranks training.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

# The first line of torchrun's failure report: its glog-style error line, or its own traceback.
LAUNCHER_REPORT = re.compile(r"^([EW]\d{4} \d\d:\d\d:\d\d|Traceback \(most recent call last\):|\[rank\d+\]: )")
RANK_VERDICT = re.compile(r"^(error|stopped): ")
SIGNALS = {9: "SIGKILL (the kernel's out-of-memory killer, most likely)", 15: "SIGTERM", 6: "SIGABRT", 11: "SIGSEGV"}


def log_path(run_dir: Path) -> Path:
    folder = run_dir / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"train-{time.strftime('%Y%m%dT%H%M%S')}.log"


PROJECT_ROOT = Path(__file__).resolve().parent.parent
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the CLI dies (even by SIGKILL); torchrun then stops its ranks."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


# How long a stopped CLI lets torchrun end on its own before it passes the signal on.
FORWARD_AFTER_S = 5.0


class _Stop(BaseException):
    """A stop signal reached the CLI while torchrun ran."""


def run_logged(
    command: list[str], *, cwd: Path, log: Path, env: dict[str, str] | None = None
) -> tuple[int, bool, int | None]:
    """(exit code, whether a rank printed its own one-line verdict, the stop signal that reached this process).

    SIGINT (Ctrl-C) or SIGTERM (`kill`, a scheduler) to this process stops torchrun, and is remembered: the
    ranks' non-zero exits that follow are the interruption, not a failure, even when the ranks were still
    starting and could not say so themselves."""
    explained = False
    received: list[int] = []

    def stop(signum: int, frame: object) -> None:
        received.append(signum)
        if len(received) == 1:  # a second Ctrl-C while torchrun stops its ranks waits for them too
            raise _Stop

    with open(log, "w", encoding="utf-8") as record:
        record.write("$ " + " ".join(command) + "\n")
        # torchrun sets OMP_NUM_THREADS=1 when it is unset, with a banner saying so; set the same value quietly.
        environment = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **(env or {})}
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
        process = subprocess.Popen(
            command,
            cwd=cwd,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            env=environment,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 (no threads start between fork and exec here)
        )
        assert process.stderr is not None

        def copy() -> None:
            nonlocal explained
            echoing = True
            for line in process.stderr:  # type: ignore[union-attr]
                record.write(line)
                record.flush()
                if RANK_VERDICT.match(line):
                    explained = True
                    print(line, end="", file=sys.stderr, flush=True)
                    continue
                if LAUNCHER_REPORT.match(line):
                    echoing = False  # the launcher's report: the log keeps it
                if echoing:
                    print(line, end="", file=sys.stderr, flush=True)

        reader = threading.Thread(target=copy, daemon=True)
        reader.start()
        previous: dict[int, Any] = {}
        try:
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, stop)
            code = process.wait()
        except (_Stop, KeyboardInterrupt):
            received[:] = received or [signal.SIGINT]  # KeyboardInterrupt: Ctrl-C before the handler was set
            try:  # Ctrl-C reached torchrun and the ranks too: they stop and record it as theirs (a SIGTERM sent
                code = process.wait(timeout=FORWARD_AFTER_S)  # on at once would be what the ranks recorded)
            except subprocess.TimeoutExpired:  # the signal was this process's alone: on to torchrun
                process.send_signal(received[0])
                code = process.wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        reader.join(timeout=10)
    return code, explained, (received[0] if received else None)


def rank_exit_code(code: int, log: Path) -> int:
    """The failing rank's own exit code (2: bad input, 3: stopped by a rule) rather than torchrun's 1."""
    found = re.search(r"exitcode\s*:\s*(-?\d+)", log.read_text(encoding="utf-8", errors="replace"))
    return int(found.group(1)) if found and int(found.group(1)) > 0 else code


def failure_line(code: int, log: Path) -> str:
    """One line for a job that failed without a rank saying why."""
    text = log.read_text(encoding="utf-8", errors="replace")
    signal = re.search(r"Signal (\d+) \(", text) or re.search(r"exitcode\s*:\s*-(\d+)", text)
    if signal:
        number = int(signal.group(1))
        return (
            f"error: a rank was killed by {SIGNALS.get(number, f'signal {number}')}; the launcher's report is in {log}"
        )
    return f"error: the run failed (exit code {code}); the launcher's report and the ranks' output are in {log}"


def interruption_line(run_dir: Path, since: float) -> str | None:
    """One line for a run that a stop signal ended (Ctrl-C, SIGTERM), from the run_status.json it wrote on the
    way out after `since`; None for any other ending."""
    import json

    try:
        status = json.loads((run_dir / "run_status.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(status, dict) or status.get("state") != "interrupted":
        return None
    if not isinstance(status.get("updated_at"), (int, float)) or status["updated_at"] < since:
        return None  # an earlier run's ending
    return f"interrupted: {status.get('message', '')}"
