"""One training run per run folder at a time: the second gets one line naming the first (docs/running.md).

Two runs in one folder would interleave their checkpoints and metrics. `hold_run_lock` takes an exclusive
flock on RUN_DIR/.train.lock and writes who holds it there; `hardware-selector train` holds it for its whole
job (and tells its ranks so through HELD_ENV), a runner started another way (launch.sh, SLURM) takes it on
rank 0, and `hardware-selector tune RUN_DIR` holds it while its trials run (a run beside them would share their
cores and skew what they measure, and the winner replaces the folder's plan). The lock goes with the process
that holds it, however it ends.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from planner.errors import UserInputError

LOCK_FILE = ".train.lock"
HELD_ENV = "HARDWARE_SELECTOR_RUN_LOCK"  # the folder whose lock the launching `train` holds for these ranks
PROBE_RETRIES = 5
TUNING = "tuning"  # the lock file's second line while `tune` holds it: the refusal says a tune, not a run
_HELD_HERE: set[str] = set()  # folders holding_run_lock holds: this process's own later checks pass (tune's winner)


def hold_run_lock(run_dir: Path, activity: str = "") -> IO[str] | None:
    """The open lock file (keep it until the run ends), or None when the launching `train` already holds it.
    `activity`: TUNING for `tune`, whose holder line says so."""
    run_dir = Path(run_dir).resolve()
    if os.environ.get(HELD_ENV) == str(run_dir) or not (run_dir / "plan.json").is_file():
        return None  # held by `train` for its ranks; or not a run folder, which the folder's reader says
    if str(run_dir) in _HELD_HERE:
        return None
    handle = open(run_dir / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 (held for the whole run)
    for attempt in range(PROBE_RETRIES):  # `watch` probes the lock for an instant; a real holder keeps it
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if attempt + 1 < PROBE_RETRIES:
                time.sleep(0.2)
    else:
        handle.seek(0)
        holder = handle.read().strip()
        handle.close()
        raise _held(run_dir, holder) from None
    handle.seek(0)
    handle.truncate()
    # Who holds it, for the next run's line and for `watch`, which tells a dead run from a live one by it.
    handle.write(f"PID {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    if activity:
        handle.write(f"{activity}\n")
    handle.flush()
    return handle


@contextmanager
def holding_run_lock(run_dir: Path, activity: str = "") -> Iterator[None]:
    """hold_run_lock for a block of this process (tune's trials and winner), let go of at its end."""
    handle = hold_run_lock(run_dir, activity)
    if handle is not None:
        _HELD_HERE.add(str(Path(run_dir).resolve()))
    try:
        yield
    finally:
        if handle is not None:
            _HELD_HERE.discard(str(Path(run_dir).resolve()))
            handle.close()


MIXED = "two runs in one folder would mix their checkpoints and metrics"


def refuse_if_held(run_dir: Path, why: str = MIXED) -> None:
    """hold_run_lock's refusal without taking the lock (nor writing the lock file): for `train --dry-run`, and
    for `plan --emit --force` and `tune RUN_DIR`, which would move a running run's state from under it."""
    if str(Path(run_dir).resolve()) in _HELD_HERE:
        return
    if run_alive(run_dir):
        raise _held(Path(run_dir).resolve(), (Path(run_dir) / LOCK_FILE).read_text(encoding="utf-8").strip(), why)


def _held(run_dir: Path, holder: str, why: str = MIXED) -> UserInputError:
    who, _, activity = holder.partition("\n")
    if activity.strip() == TUNING:
        return UserInputError(
            f"{run_dir} is being tuned by {who}; wait for that tune to end or stop it ("
            + (
                "its trials would measure whatever else runs here, and its winner replaces this folder's plan"
                if why == MIXED
                else why
            )
            + ")"
        )
    return UserInputError(
        f"{run_dir} is being trained by {who or 'another process'}; wait for that run to end or stop it ({why})"
    )


def run_alive(run_dir: Path) -> bool | None:
    """Whether a process on this machine holds the folder's run lock: True, False (the run is gone: killed, or
    ended without a last word), or None when this machine cannot tell (never trained here, or held on another
    host, whose lock a shared file system may not show)."""
    path = Path(run_dir) / LOCK_FILE
    try:
        holder = path.read_text(encoding="utf-8")
    except OSError:
        return None
    if f" on {socket.gethostname()} " not in holder:
        return None
    with open(path, encoding="utf-8") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return False
