"""Where the benchmark database lives.

Default: $XDG_CACHE_HOME/hardware-selector/benchmarks.duckdb (~/.cache when
XDG_CACHE_HOME is unset). $HARDWARE_SELECTOR_DB, then a `--db PATH` flag,
override it.
"""

from __future__ import annotations

import os
from pathlib import Path

DB_ENV_VAR = "HARDWARE_SELECTOR_DB"
DB_FILE_NAME = "benchmarks.duckdb"


def default_db_path() -> Path:
    explicit = os.environ.get(DB_ENV_VAR)
    if explicit:
        return Path(explicit).expanduser()
    cache_root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_root).expanduser() / "hardware-selector" / DB_FILE_NAME


def resolve_db_path(path: str | Path | None) -> Path:
    """The flag's path if given, else the environment's or the default one."""
    return Path(path).expanduser() if path else default_db_path()
