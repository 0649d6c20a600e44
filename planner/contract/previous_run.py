"""A run folder re-emitted over a trained run, or trained afresh with --no-resume: move that run's state
aside, never resume it under the new plan and never delete it.

The state is what the runner writes into the folder: checkpoints/, metrics,
exports, TensorBoard events, logs and the summary. The token cache (data/)
stays: it is keyed by the content of the data and tokenizer, so a new plan
reuses it only when they are the same. The moved state goes to
previous/<UTC time>/ inside the folder, and the emitter says where.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

RUN_STATE = ("checkpoints", "metrics.jsonl", "final", "tensorboard", "logs", "run_summary.json")
PREVIOUS = "previous"


def previous_run_state(run_dir: Path) -> list[str]:
    """Names of run state found in `run_dir` (empty for a fresh or never-trained folder)."""
    return [name for name in RUN_STATE if (run_dir / name).exists()]


def archive_previous_run(run_dir: Path) -> Path | None:
    """Move the previous run's state to previous/<time>/; returns that folder, or None when there was none."""
    found = previous_run_state(run_dir)
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
        os.replace(run_dir / name, destination / name)  # same file system: a rename, nothing is copied
    return destination
