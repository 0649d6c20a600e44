"""Which GPUs a benchmark database holds records of, in a small JSON file beside it.

`plan` calibrates on the records of its GPU only (benchmarks_db/calibrate.py). Importing DuckDB and opening the
file cost ~0.1 s, a fifth of `plan` on a catalog model (docs/performance.md, "Planner speed"), and usually find
nothing: the records are of the machines benchmarked, the plan is for the GPUs to buy. The index
(`<db>.gpus.json`) lets calibrate.plan_calibration and BenchmarkStore.runs answer "no record of this GPU"
without DuckDB.

It is trusted only while the database file is exactly as it was when the index was written: the same size,
modification time (ns) and inode, the schema version this code reads, and no write-ahead log beside it (DuckDB's
`<db>.wal` holds committed rows that are not in the file yet). Anything else, and a missing or unreadable index,
means reading the database as before; that read (BenchmarkStore.reading) writes the index anew, and every write
through BenchmarkStore.writing removes it first and writes it again after. A program that writes the file
without us (the duckdb CLI) changes its modification time, so its rows are not hidden by an old index; only on a
file system whose timestamps are coarse (a second, say) could a write that keeps the size and lands in the same
tick as the index go unseen, until the next write or `rm <db>.gpus.json`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from planner.errors import UserInputError
from planner.files import write_json_atomic

from .schema import SCHEMA_VERSION

INDEX_VERSION = 1  # of this file's layout; another one is not trusted (and is rewritten by the next read)


def index_path(db: Path) -> Path:
    return db.with_name(db.name + ".gpus.json")


def file_state(db: Path) -> list[int] | None:
    """What identifies this version of the database file, or None when no index may describe it (no file, or
    rows pending in a write-ahead log)."""
    try:
        stat = os.stat(db)
    except OSError:
        return None
    if db.with_name(db.name + ".wal").exists():
        return None
    return [stat.st_size, stat.st_mtime_ns, stat.st_ino]


def may_hold_gpu(db: Path, gpu: str) -> bool:
    """False only when a current index says the database has no record whose gpu_name equals `gpu` ignoring
    case (the filter BenchmarkStore.runs applies in SQL, `lower(gpu_name) = lower(?)`)."""
    if not gpu.isascii():  # DuckDB's lower() and Python's agree on ASCII; for anything else, ask DuckDB
        return True
    gpus = _current_gpus(db)
    return gpus is None or gpu.lower() in gpus


def is_current(db: Path) -> bool:
    return _current_gpus(db) is not None


def _current_gpus(db: Path) -> frozenset[str] | None:
    try:
        document: Any = json.loads(index_path(db).read_text())
        state = file_state(db)
        if (
            state is not None
            and document["database"] == state
            and document["version"] == INDEX_VERSION
            and document["schema_version"] == SCHEMA_VERSION
        ):
            return frozenset(document["gpus"])
    except (OSError, ValueError, TypeError, KeyError):  # missing, unreadable, cut short, another layout
        pass
    return None


def stored_gpus(connection: Any) -> list[str]:
    """The GPUs of every stored row, lower-cased by DuckDB itself (the same lower() runs' filter applies)."""
    return [row[0] for row in connection.execute("SELECT DISTINCT lower(gpu_name) FROM runs ORDER BY 1").fetchall()]


def write_index(db: Path, gpus: list[str], state: list[int] | None) -> None:
    """Record `gpus` as what the database holds, if the file is still in `state` (the one they were read in).

    Called with the database's lock held and its connection closed. An index that cannot be written (a
    read-only folder) is no error: the next `plan` reads the database, as it did before the index existed."""
    if state is None or file_state(db) != state:
        return
    document = {"version": INDEX_VERSION, "schema_version": SCHEMA_VERSION, "database": state, "gpus": gpus}
    try:
        write_json_atomic(index_path(db), document)
    except UserInputError:
        pass


def forget_index(db: Path) -> None:
    """Remove the index before a write: until the writer has written it anew, readers read the database."""
    try:
        index_path(db).unlink(missing_ok=True)
    except OSError:  # a folder we cannot change: the write changes the file's mtime, which outdates the index anyway
        pass
