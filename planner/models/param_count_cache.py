"""Exact parameter counts, remembered per config.json (docs/models-and-hardware.md, "meta-device").

Counting a local config exactly builds the transformers model on the meta
device (param_count.py), and importing transformers' model classes is most of
the 6-7 seconds a `plan --model ./my-model` takes. The count depends only on
the config, the installed torch and transformers, and how we count, so it is
kept under $XDG_CACHE_HOME/hardware-selector/param-counts/ (~/.cache without
XDG_CACHE_HOME), keyed by all four: a new config, an upgrade or a change to
param_count.py counts afresh, never reads a stale value. An entry that cannot
be read is counted again and rewritten (atomically); a cache that cannot be
written costs only the time. HARDWARE_SELECTOR_NO_COUNT_CACHE=1 turns it off.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from planner.errors import UserInputError
from planner.files import write_text_atomic
from planner.models.spec import ParamCounts

NO_CACHE_ENV_VAR = "HARDWARE_SELECTOR_NO_COUNT_CACHE"
_COUNTER_SOURCE = Path(__file__).with_name("param_count.py")


def cache_folder() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root).expanduser() / "hardware-selector" / "param-counts"


def _key(config: dict) -> str | None:
    """The entry's name, or None when torch or transformers is not installed (counting would fail anyway)."""
    try:
        versions = [importlib.metadata.version(name) for name in ("torch", "transformers")]
    except importlib.metadata.PackageNotFoundError:
        return None
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    digest.update(" ".join(versions).encode())
    digest.update(_COUNTER_SOURCE.read_bytes())
    return digest.hexdigest()[:32]


def cached_counts(config: dict, count: Callable[[dict], ParamCounts]) -> ParamCounts:
    """count(config), from the cache when this config was counted before under the same software."""
    key = None if os.environ.get(NO_CACHE_ENV_VAR) == "1" else _key(config)
    if key is None:
        return count(config)
    entry = cache_folder() / f"{key}.json"
    try:
        return ParamCounts.model_validate_json(entry.read_text(encoding="utf-8"))
    except (OSError, ValueError, ValidationError):
        pass  # not counted yet, or an entry that cannot be read: count it (again)
    counts = count(config)
    try:
        write_text_atomic(entry, counts.model_dump_json())
    except (OSError, UserInputError):
        pass  # a read-only or full cache: the count is still right, only not remembered
    return counts
