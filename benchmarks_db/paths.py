"""Where the benchmark database lives.

Default: $XDG_CACHE_HOME/hardware-selector/benchmarks.duckdb (~/.cache when
XDG_CACHE_HOME is unset). $HARDWARE_SELECTOR_DB, then a `--db PATH` flag,
override it.
"""

from __future__ import annotations

import os
from pathlib import Path

from planner.errors import UserInputError

DB_ENV_VAR = "HARDWARE_SELECTOR_DB"
DB_FILE_NAME = "benchmarks.duckdb"
DUCKDB_MAGIC = b"DUCK"  # bytes 8-11 of every DuckDB database file


def default_db_path() -> Path:
    explicit = os.environ.get(DB_ENV_VAR)
    if explicit:
        return Path(explicit).expanduser()
    cache_root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_root).expanduser() / "hardware-selector" / DB_FILE_NAME


def resolve_db_path(path: str | Path | None) -> Path:
    """The flag's path if given, else the environment's or the default one."""
    return Path(path).expanduser() if path else default_db_path()


def db_origin(flag: str | Path | None, flag_name: str = "--db") -> str:
    """Where the database's path came from, for its errors: the flag (`flag_name`, as the asking door spells it:
    the API's db=), the environment variable or the default (an error that says --db when the user set
    $HARDWARE_SELECTOR_DB sends them looking for a flag they never gave)."""
    if flag:
        return flag_name
    return f"${DB_ENV_VAR}" if os.environ.get(DB_ENV_VAR) else "the default database"


def check_db_path(path: Path, origin: str = "--db", flag_name: str = "--db") -> Path:
    """`path` can hold a benchmark database: an existing DuckDB file or a new path, not a folder, a link to
    nothing, a blank name or another format's file (SQLite, a CSV, /proc/self/status). Every --db reaches the
    database through here (BenchmarkStore), before a lock file is made beside it or DuckDB reads it. `origin`
    (db_origin) names where the path came from, `flag_name` what to pass another path with."""
    if path.is_dir():  # an empty --db too: it is '.' once a Path
        raise UserInputError(f"{origin} {path} is a folder; pass {flag_name} a .duckdb file (or a new path)")
    if not path.name.strip():
        raise UserInputError(f"{origin} {str(path)!r} names no file; pass {flag_name} a .duckdb file")
    if path.is_symlink() and not path.exists():
        raise UserInputError(f"{origin} {path} links to {os.readlink(path)}, which does not exist; fix the link or "
                             f"pass {flag_name} another path")  # fmt: skip
    if path.exists():
        try:
            with open(path, "rb") as handle:
                header = handle.read(12)  # /proc files report size 0 but hold bytes: read, do not stat
        except OSError as error:
            raise UserInputError(
                f"cannot read {origin} {path}: {error.strerror or error}; pass {flag_name} a file you can read"
            ) from None
        if not header:  # `touch`ed, or cut to nothing: DuckDB cannot open it, and there is nothing in it to lose
            raise UserInputError(
                f"{origin} {path} is an empty file (0 bytes), not a DuckDB database; delete it (the next run makes "
                f"a new database there) or pass {flag_name} another path"
            )
        if header[8:12] != DUCKDB_MAGIC:
            raise UserInputError(
                f"{origin} {path} is not a DuckDB database; pass {flag_name} a .duckdb file (or a new path)"
            )
    return path
