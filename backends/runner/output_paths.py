"""Every path a run will write, checked before any rank starts (docs/running.md, "Processes, errors and logs").

A metrics file that is a folder, a benchmark database that is a CSV or a folder, or a checkpoints link that
points nowhere would otherwise fail after the ranks' start-up, or after the last step. `check_output_paths`
raises the first one as one line; `train` calls it before torchrun starts and each rank again on its own
(python -m backends.run), before anything trains.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from planner.errors import UserInputError
from planner.files import check_writable


def _writable_file(path: Path, what: str, flag: str) -> None:
    """`path` can be created or appended to: not a folder, in a writable folder (made here if missing, as the
    run would make it)."""
    if path.is_dir():
        raise UserInputError(f"{flag} {path} is a folder; the run writes {what} as a file there: name a file")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise UserInputError(f"{flag} {path} is not writable; name a file the run can write {what} to")
        return
    blocking = next((parent for parent in path.parents if parent.exists()), None)
    if blocking is not None and not blocking.is_dir():  # mkdir would say only "File exists"
        raise UserInputError(f"{flag} {path}: {blocking} is a file, not a folder; name a path in a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # as the run would; a folder that cannot be made fails here
    except OSError as error:
        raise UserInputError(f"{flag} {path}: cannot create {path.parent} ({error.strerror or error})") from None
    try:
        check_writable(path)  # a file made and removed there: os.access says yes to root in /proc
    except UserInputError as error:
        raise UserInputError(f"{flag}: {error}") from None


def check_database(path: Path, origin: str = "--db") -> None:
    """A database a run records into: an existing DuckDB file, or a new one in a writable folder."""
    from benchmarks_db.paths import check_db_path

    check_db_path(path, origin)  # a record written into another format's file would be lost
    _writable_file(path, "the benchmark database", origin)  # $HARDWARE_SELECTOR_DB when that named it


def check_output_paths(args: argparse.Namespace) -> None:
    """The metrics file, the benchmark database (when the run records) and the checkpoints folder."""
    run_dir = Path(args.plan)
    if not (run_dir / "plan.json").is_file():
        return  # not a run folder: the folder's reader says so in its own line (backends/runner/folder.py)
    metrics = Path(args.metrics) if args.metrics else run_dir / "metrics.jsonl"
    _writable_file(metrics, "metrics", "--metrics" if args.metrics else "metrics file")
    if args.record and not args.tiny:  # a --tiny run records nothing (backends/runner/summary.py)
        from benchmarks_db.paths import db_origin, resolve_db_path

        check_database(resolve_db_path(args.db), db_origin(args.db))
    checkpoints = run_dir / "checkpoints"
    if checkpoints.is_symlink() and not checkpoints.exists():
        raise UserInputError(
            f"{checkpoints} links to {os.readlink(checkpoints)}, which does not exist; create it, or remove the link"
        )
