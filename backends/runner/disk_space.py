"""A disk that fills up during a checkpoint save: recognised, explained in one line, the last good checkpoint kept.

A full disk does not always say so: torch.save reports it as a RuntimeError
from its zip writer ("unexpected pos ..."), safetensors and DCP as an I/O
error whose text names errno 28. So a failed save is called out of space
when the error says so, or when the folder's file system has less room left
than the save needed (the previous checkpoint's size; 1 MiB when there is
none yet). The message names the folder, that size and what is free, and the
checkpoint the run resumes from once there is room (docs/errors.md, "Runs").
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

MIB = 1 << 20


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def free_bytes(folder: Path) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def out_of_space(failure: BaseException, folder: Path, needed: int | None) -> bool:
    chain: BaseException | None = failure
    while chain is not None:
        if getattr(chain, "errno", None) == errno.ENOSPC or "no space left" in str(chain).lower():
            return True
        chain = chain.__cause__ or chain.__context__
    free = free_bytes(folder)
    return free is not None and free < (needed or MIB)


class CheckpointSpaceError(OSError):
    """The one line a rank prints when a checkpoint did not fit (backends/runner/failures.py uses it as is)."""

    def __init__(self, folder: Path, tag: str, needed: int | None, intact: str | None):
        free = free_bytes(folder)
        size = f"about {needed / MIB:.1f} MiB (the size of {intact})" if needed else "more room"
        kept = (
            f"{intact} is intact and the run resumes from it"
            if intact
            else "no earlier checkpoint exists, so the run starts afresh"
        )
        super().__init__(
            errno.ENOSPC,
            f"no space left on the device while saving checkpoint {tag} in {folder}: the save needs {size}, "
            f"{(free or 0) / MIB:.1f} MiB is free; free space there (or keep fewer checkpoints) and run again: {kept}",
        )

    def __str__(self) -> str:
        return str(self.strerror)
