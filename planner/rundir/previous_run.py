"""A run folder re-emitted over a trained run, or trained afresh with --no-resume: move that run's state
aside, never resume it under the new plan and never delete it.

The state is what the runner writes into the folder: checkpoints/ (and the HF Trainer door's
checkpoints-trainer/, whichever door trains afresh), metrics,
exports, TensorBoard events, the summary and run_status.json. The token cache (data/)
stays: it is keyed by the content of the data and tokenizer, so a new plan
reuses it only when they are the same. The moved state goes to
previous/<UTC time>/ inside the folder, and the emitter says where. A
checkpoints/ that is a mount point or a symlink to another volume stays
where it is: what it holds moves into a previous-<time>/ folder inside it,
linked from previous/<time>/checkpoints.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

# logs/ is not run state: its files are named by launch time, and `train` writes the current launch's log
# there before the runner decides whether it starts afresh (moving it would hide the running job's log).
# run_status.json too: left behind, `watch` would show the moved run as the new plan's (finished, its checkpoint).
TRAINER_CHECKPOINTS = "checkpoints-trainer"  # the HF Trainer door's own checkpoints (backends/runner/trainer.py)
RUN_STATE = (
    "checkpoints",
    TRAINER_CHECKPOINTS,
    "metrics.jsonl",
    "final",
    "tensorboard",
    "run_summary.json",
    "run_status.json",
)
PREVIOUS = "previous"


def previous_run_state(run_dir: Path) -> list[str]:
    """Names of run state found in `run_dir` (empty for a fresh or never-trained folder; empty folders
    do not count, so a checkpoints/ made ready for a mount is not a previous run)."""
    return [name for name in RUN_STATE if _holds_something(run_dir / name)]


def _holds_something(path: Path) -> bool:
    if path.is_dir():
        return any(path.iterdir())
    return path.exists()


def _stays_in_place(path: Path) -> bool:
    """A mount point or a symlink to another disk (checkpoints on a scratch volume): move what it holds."""
    return path.is_symlink() or os.path.ismount(path)


def archive_previous_run(run_dir: Path, also: list[str] | None = None, *, state: bool = True) -> Path | None:
    """Move the previous run's state (unless not `state`) and the files named in `also` to previous/<time>/;
    returns that folder, or None when there was nothing to move."""
    found = [*(previous_run_state(run_dir) if state else []), *(also or [])]
    if not found:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    destination = run_dir / PREVIOUS / stamp
    suffix = 1
    while destination.exists():
        suffix += 1
        destination = run_dir / PREVIOUS / f"{stamp}-{suffix}"
    destination.mkdir(parents=True)
    for name in found:
        source = run_dir / name
        if _stays_in_place(source):  # its contents go to a folder on the same volume, then linked from here
            aside = source / f"{PREVIOUS}-{destination.name}"
            aside.mkdir()
            for entry in list(source.iterdir()):
                if entry != aside:
                    os.replace(entry, aside / entry.name)
            (destination / name).symlink_to(aside.resolve(), target_is_directory=True)
        else:
            os.replace(source, destination / name)  # same file system: a rename, nothing is copied
    return destination
