"""YAML documents parsed once, then read back as JSON (docs/performance.md, "Planner speed").

Every `plan` prices its GPUs from planner/catalog/prices.yaml (planner/cost/prices.py). Importing PyYAML costs
~17 ms of CPU (its modules compile their regular expressions on import) and parsing the file ~3 ms, for a file
that changes with a release. The parsed document is kept under $XDG_CACHE_HOME/hardware-selector/yaml/ (~/.cache
without XDG_CACHE_HOME) as JSON, named by the SHA-256 of the text: a changed file has a new name, so an entry is
never stale. Only a document that JSON holds exactly is kept: mappings with text keys, lists, text, numbers,
booleans, null, dates and times (tagged); anything else (a set, binary, a mapping with other keys) is parsed
every time, as is an entry that cannot be read (then written again, atomically). A cache that cannot be
written costs only the time.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path

from planner.errors import UserInputError
from planner.files import write_text_atomic

# A tagged scalar is a one-key mapping; a document holding such a mapping itself is not kept (it would read back
# as the scalar).
_TAGS: dict[str, type[dt.date]] = {"$yaml-datetime": dt.datetime, "$yaml-date": dt.date}


class UnreadableYaml(ValueError):
    """The text is not YAML; PyYAML's own error is the cause (its first line says where)."""


def cache_folder() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root).expanduser() / "hardware-selector" / "yaml"


def load_yaml(text: str) -> object:
    """The document in `text`, as PyYAML's safe loader reads it (libyaml's where PyYAML was built with it)."""
    try:
        entry = cache_folder() / f"{hashlib.sha256(text.encode('utf-8')).hexdigest()}.json"
    except RuntimeError:  # no home folder to keep it in (HOME unset, a user without a passwd entry)
        return _parse(text)
    try:
        return json.loads(entry.read_text(encoding="utf-8"), object_hook=_untag)
    except (OSError, ValueError):
        pass  # not parsed yet, or an entry that cannot be read: parse it (again)
    document = _parse(text)
    if _exact_in_json(document):
        try:
            write_text_atomic(entry, json.dumps(document, default=_tag, allow_nan=True))
        except (OSError, UserInputError):
            pass  # a read-only or full cache: the document is still right, only not remembered
    return document


def _parse(text: str) -> object:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the same documents, parsed some ten times faster
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as error:
        raise UnreadableYaml(str(error)) from error


def _exact_in_json(value: object) -> bool:
    if value is None or isinstance(value, (str, bool, int, float, dt.date)):  # datetime is a date
        return True
    if isinstance(value, list):
        return all(_exact_in_json(item) for item in value)
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)) in _TAGS:
            return False
        return all(isinstance(key, str) and _exact_in_json(item) for key, item in value.items())
    return False


def _tag(value: object) -> dict[str, str]:
    for tag, kind in _TAGS.items():  # datetime first: it is a date too
        if isinstance(value, kind):
            return {tag: value.isoformat()}
    raise TypeError(f"{type(value).__name__} is not kept as JSON")


def _untag(mapping: dict) -> object:
    if len(mapping) == 1:
        tag, text = next(iter(mapping.items()))
        if tag in _TAGS:
            return _TAGS[tag].fromisoformat(text)
    return mapping
