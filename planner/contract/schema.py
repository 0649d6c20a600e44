"""The run folder's one schema version, and reading its JSON files into one-line errors.

Every file the emitter writes for the runner (plan.json with its run block,
engine.json) carries the same SCHEMA_VERSION. A file from an older version
is refused with the command that re-emits it; a newer one asks for an
upgrade. Nothing is guessed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.errors import UserInputError

# 1: plan.json's run block held tp/pp as loose fields and engine.json a layout block of its own.
# 2: one ParallelDims everywhere, the run block is the typed RunConfig (model source, data, hyperparameters).
SCHEMA_VERSION = 2
REEMIT_HINT = "re-emit the run folder with `hardware-selector plan ... --emit DIR --force`"


def describe_validation_error(error: ValidationError, reference: str) -> str:
    """The first problem of a pydantic error as 'where: what' (unknown keys point at the reference doc)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    if first["type"] == "extra_forbidden":
        return f"unknown or unsupported key '{where}'; see {reference} for the keys it accepts"
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"'{where}': {message}" if where else message  # a check across keys names no single one


def read_json_file(path: Path, what: str) -> Any:
    """The parsed JSON of `path`, or a UserInputError naming the file and the problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserInputError(f"{path} does not exist; {what}") from None
    except IsADirectoryError:
        raise UserInputError(f"{path} is a directory, not a JSON file; {what}") from None
    except UnicodeDecodeError:
        raise UserInputError(f"{path} is not UTF-8 text; {what}") from None
    except OSError as error:
        raise UserInputError(f"{path}: cannot read it ({error.strerror}); {what}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise UserInputError(f"{path} is not valid JSON ({error.msg} at line {error.lineno}); {what}") from None


def check_schema_version(found: Any, origin: str) -> None:
    """Refuse a document whose schema_version is not this version's (older: re-emit; newer: upgrade)."""
    if found == SCHEMA_VERSION:
        return
    if isinstance(found, int) and not isinstance(found, bool) and found > SCHEMA_VERSION:
        raise UserInputError(
            f"{origin} has schema_version {found}, newer than this hardware-selector's "
            f"{SCHEMA_VERSION}; upgrade hardware-selector, or {REEMIT_HINT}"
        )
    raise UserInputError(
        f"{origin} has schema_version {found!r}, written by an older hardware-selector "
        f"(this one reads {SCHEMA_VERSION}); {REEMIT_HINT}"
    )
