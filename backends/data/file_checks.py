"""A data file that is not what its extension says, named in one line with the line or row and what was expected.

pyarrow's own messages for a malformed `.jsonl` or a damaged `.parquet` run
over several lines and name neither the file nor the place. These read the
file's bytes instead: a JSON-lines file line by line (the first line that is
not a JSON object with a text field), a parquet file by its magic bytes
(`PAR1` at both ends: a file that lacks the first is no parquet file, one
that lacks the last was cut short) and its footer. `check_source` runs in
`train` before torchrun starts (backends/runner/preflight.py); the reader
(documents.py) asks the same questions when pyarrow fails inside a rank.
"""

from __future__ import annotations

import json
from pathlib import Path

from planner.errors import UserInputError
from planner.rundir.data_sources import parquet_column_problem, parquet_magic_problem, value_problem


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:200] if text else type(error).__name__


def json_problem(path: Path, field: str) -> str | None:
    """The first line of a JSON-lines file that is not a JSON object with a text `field`, as one line (or None).

    A `.json` file whose first line is not JSON on its own is read whole (an array or object spread over
    lines, as datasets reads it) and its items are checked."""
    with open(path, "rb") as handle:
        first = True
        for number, raw in enumerate(handle, 1):
            line = raw.strip()
            if not line:
                continue
            try:
                value = json.loads(line)
            except UnicodeDecodeError:
                return f"{path}, line {number}: not UTF-8 text; convert the file to UTF-8"
            except ValueError as error:
                if first and path.suffix.lower() == ".json" and line[:1] in (b"[", b"{"):
                    return _document_problem(path, field)
                return (
                    f"{path}, line {number}: not JSON ({getattr(error, 'msg', error)}); each line of a "
                    f"{path.suffix.lower() or 'JSON-lines'} file must be one JSON object"
                )
            first = False
            problem = value_problem(value, field)
            if problem:
                return f"{path}, line {number}: {problem}"
    return None


def _document_problem(path: Path, field: str) -> str | None:
    try:
        document = json.loads(path.read_bytes())
    except UnicodeDecodeError:
        return f"{path}: not UTF-8 text; convert the file to UTF-8"
    except json.JSONDecodeError as error:
        return f"{path}, line {error.lineno}, column {error.colno}: not JSON ({error.msg})"
    for number, item in enumerate(document if isinstance(document, list) else [], 1):
        problem = value_problem(item, field)
        if problem:
            return f"{path}, item {number} of its array: {problem}"
    return None


def parquet_problem(path: Path) -> str | None:
    """A file that is no parquet file, a truncated one, or one whose footer cannot be read, as one line."""
    problem = parquet_magic_problem(path)  # the ends, as `plan --emit` reads them
    if problem:
        return problem
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(path)
    except Exception as error:  # pyarrow's ArrowInvalid / OSError for a footer that does not parse
        return f"{path}: a damaged parquet footer ({first_line(error)}); copy or write the file again"
    return None


def check_source(path: Path, kind: str, field: str) -> None:
    """Raise the first problem of a .jsonl/.json or .parquet source as a one-line UserInputError."""
    try:
        if kind == "json":
            problem = json_problem(path, field)
        elif kind == "parquet":
            problem = parquet_problem(path) or parquet_column_problem(path, field)
        else:
            return
    except OSError as error:
        raise UserInputError(f"{path}: cannot be read ({error.strerror or error})") from None
    if problem:
        raise UserInputError(problem)
