"""A rank that fails says what happened in one line; its traceback goes to the run folder's logs.

Out of memory, a full disk and a vanished peer are named as such, with what
to do; anything else is a bug, reported with its type and message. Ranks
also ask the kernel to end them when their launcher dies, so a killed
torchrun leaves no orphaned ranks holding GPUs (Linux PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import errno
import os
import signal
import time
import traceback
from pathlib import Path

from backends.monitoring.peak_memory import MemoryLimitExceeded
from backends.runner.disk_space import CheckpointSpaceError


def die_with_the_launcher() -> None:
    """Under a launcher, receive SIGKILL when the parent process dies (Linux; a no-op elsewhere)."""
    if "TORCHELASTIC_RUN_ID" not in os.environ and "LOCAL_RANK" not in os.environ:
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        return


def lost_a_peer(failure: BaseException) -> bool:
    """A collective that failed because another rank died first (gloo and NCCL say so in these words)."""
    text = str(failure).lower()
    return "connection" in text and ("closed" in text or "reset" in text or "refused" in text)


def _advice(failure: BaseException) -> str:
    text = str(failure).lower()
    if isinstance(failure, (MemoryLimitExceeded, CheckpointSpaceError)):  # their own line says what to do
        return str(failure)
    if isinstance(failure, MemoryError) or "out of memory" in text or type(failure).__name__ == "OutOfMemoryError":
        return (
            "out of memory: lower the micro-batch, turn on activation checkpointing, or plan a sharded strategy "
            "(hardware-selector plan shows what fits)"
        )
    if isinstance(failure, OSError) and failure.errno == errno.ENOSPC:
        where = getattr(failure, "filename", None) or "the run folder"
        return f"no space left on the device while writing {where}; free space there (checkpoints and final/ need it)"
    if lost_a_peer(failure):
        return "lost contact with another rank (it probably failed first: see its line)"
    return f"{type(failure).__name__}: {str(failure).splitlines()[0][:300] if str(failure) else ''}"


def describe_failure(failure: BaseException, run_dir: Path, rank: int) -> str:
    """The one line for this rank's failure; the traceback is written to RUN_DIR/logs/rank<r>-<time>.log."""
    where = ""
    try:
        folder = Path(run_dir) / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"rank{rank}-{time.strftime('%Y%m%dT%H%M%S')}.log"
        path.write_text("".join(traceback.format_exception(failure)), encoding="utf-8")
        where = f"; traceback in {path}"
    except OSError:
        where = " (the traceback could not be written: the run folder is not writable)"
    return f"error: rank {rank} failed: {_advice(failure)}{where}"
