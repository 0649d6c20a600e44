"""Where the benchmark database lives, and how files are written without tearing.

Default: $XDG_CACHE_HOME/hardware-selector/benchmarks.duckdb (~/.cache when
XDG_CACHE_HOME is unset). $HARDWARE_SELECTOR_DB, then a `--db PATH` flag,
override it.
"""

from __future__ import annotations

import json
import os
import tempfile
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


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write to a temp file in the same directory, then rename over the target."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return target


def write_json_atomic(path: str | Path, document: object) -> Path:
    return write_text_atomic(path, json.dumps(document, indent=2, default=str) + "\n")
