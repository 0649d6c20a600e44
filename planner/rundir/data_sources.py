"""Which files a run's --data and --eval-data patterns name, and of which kind: the torch-free part of reading data.

`plan --emit`, `train DIR --data ...` (run_overrides.py) and the ranks' reader (backends/data/documents.py) all
resolve a pattern here, so a pattern `train` would refuse (nothing matches, an unknown extension such as .csv,
files of several kinds) is refused at emit already, with the same line.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import UserInputError

FORMATS = {".txt": "text", ".text": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
SAVED_DATASET_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
TEXT_TYPES = ("string", "large_string", "string_view")  # pyarrow's text column types


@dataclass(frozen=True)
class Source:
    """One readable thing: a file of a known format, or a saved dataset folder."""

    path: Path
    kind: str  # "text", "json", "parquet" or "saved"

    def files(self) -> list[Path]:
        """The files whose bytes define this source's content (for the cache key)."""
        if self.kind != "saved":
            return [self.path]
        return sorted(p for p in self.path.rglob("*") if p.is_file() and not p.name.startswith("."))


def is_saved_dataset(folder: Path) -> bool:
    return folder.is_dir() and any((folder / marker).is_file() for marker in SAVED_DATASET_MARKERS)


def matches(pattern: str) -> list[str]:
    """The paths a pattern names now (a glob, ~ expanded), in a deterministic order."""
    return sorted(glob.glob(os.path.expanduser(pattern), recursive=True))


def gone_from_run_folder(run_dir: Path, patterns: list[str], flag: str) -> str | None:
    """The one line for a pattern plan.json holds that names nothing any more (the data was moved after `plan
    --emit`), told as what it is: the folder's, not a flag this command was given. None when all are there."""
    missing = next((pattern for pattern in patterns if str(pattern).strip() and not matches(pattern)), None)
    if missing is None:
        return None
    return (
        f"{run_dir / 'plan.json'} reads its {flag} from {missing} (given at `plan --emit`), and nothing is there now; "
        f"put the data back, or pass `hardware-selector train {run_dir} {flag} NEW_PATH` to read it where it is"
    )


def resolve_sources(patterns: list[str], flag: str = "--data") -> list[Source]:
    """Every source the patterns name, in a deterministic order; errors name the pattern."""
    sources: list[Source] = []
    for pattern in patterns:
        if not str(pattern).strip():  # '' would be the current folder, every JSON file under it included
            raise UserInputError(f"{flag} is empty; give a .txt, .jsonl or .parquet file, a glob of them, or a folder")
        matched = matches(pattern)
        if not matched:
            raise UserInputError(
                f"{flag} {pattern}: no such file or folder; give a .txt, .jsonl or .parquet file, "
                "a glob of them, or a folder written by datasets' save_to_disk"
            )
        found = [source for match in matched for source in _sources_at(Path(match), flag)]
        kinds = sorted({source.path.suffix.lower() or source.kind for source in found})
        if len({source.kind for source in found}) > 1:  # a folder of text beside configs, say: say which files
            raise UserInputError(
                f"{flag} {pattern} matches files of several kinds ({', '.join(kinds)}); name one kind per "
                "pattern, e.g. 'corpus/*.jsonl'"
            )
        sources += found
    if not sources:
        raise UserInputError(
            f"{flag} {' '.join(patterns)}: no .txt, .jsonl, .json or .parquet file there; convert the text to one "
            "of them, or point at a folder that holds them"
        )
    return list(dict.fromkeys(sources))


def _sources_at(path: Path, flag: str) -> list[Source]:
    if path.is_symlink() and not path.exists():  # glob matches the link; reading it would fail in the ranks
        raise UserInputError(f"{flag} {path} links to {os.readlink(path)}, which does not exist; fix the link")
    if is_saved_dataset(path):
        return [Source(path.resolve(), "saved")]
    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in FORMATS)
        return [Source(p.resolve(), FORMATS[p.suffix.lower()]) for p in found]
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise UserInputError(f"{flag} {path}: unknown file type '{path.suffix}'; use .txt, .jsonl, .json or .parquet")
    return [Source(path.resolve(), kind)]


def no_text_message(label: str, sources: list[Source]) -> str:
    """The one line for data whose every document is empty. --text-field is named only where a field is read:
    it is refused for .txt files (check_text_field_applies), so pointing .txt data to it would lead nowhere."""
    fields = " and --text-field" if any(source.kind != "text" for source in sources) else ""
    return f"{label} holds no text (every document is empty); check the files{fields}"


def check_text_field_applies(patterns: list[str], text_field: str) -> None:
    """--text-field names the text column of .jsonl, .json or .parquet rows (or of a saved dataset); data made of
    .txt files alone has no columns, and a field given for it would be silently ignored."""
    if patterns and {source.kind for source in resolve_sources(patterns)} == {"text"}:
        raise UserInputError(
            f"--text-field {text_field} names a column of .jsonl, .json or .parquet rows, and this run's data is "
            ".txt files, which have none; drop --text-field"
        )


def value_problem(value: Any, field: str) -> str | None:
    """What is wrong with one row (a parsed JSON value) as a document, or None."""
    if not isinstance(value, dict):
        kind = "an array" if isinstance(value, list) else f"a {type(value).__name__}"
        return f"{kind} where a JSON object with a '{field}' field was expected"
    if field not in value:
        columns = ", ".join(map(repr, value)) or "none"
        return f"no '{field}' field (it has {columns}); name the text field with --text-field"
    if not isinstance(value[field], str):
        kind = "null" if value[field] is None else type(value[field]).__name__
        return f"the '{field}' field holds {kind}, not text; name a text field with --text-field"
    return None


def parquet_column_problem(path: Path, field: str) -> str | None:
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    if field not in schema.names:
        columns = ", ".join(map(repr, schema.names)) or "none"
        return f"{path}: no '{field}' field (it has {columns}); name the text field with --text-field"
    kind = str(schema.field(field).type)
    if kind not in TEXT_TYPES:
        return f"{path}: the '{field}' field holds {kind}, not text; name a text field with --text-field"
    return None


PARQUET_MAGIC = b"PAR1"


def parquet_magic_problem(path: Path) -> str | None:
    """A file with no parquet magic bytes at its start (no parquet file: a renamed text file) or at its end (cut
    short), as one line; None when both ends are there. Reads eight bytes."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(len(PARQUET_MAGIC))
        handle.seek(max(0, size - len(PARQUET_MAGIC)))
        tail = handle.read(len(PARQUET_MAGIC))
    if head != PARQUET_MAGIC:
        return f"{path}: not a parquet file (it does not begin with the magic bytes PAR1); check what the file holds"
    if tail != PARQUET_MAGIC or size < 3 * len(PARQUET_MAGIC):
        return (
            f"{path}: a truncated parquet file ({size:,} bytes, without the magic bytes PAR1 at its end); "
            "copy or write it again"
        )
    return None


def check_text_field_present(patterns: list[str], flag: str, text_field: str) -> None:
    """At emit, what reading a few bytes of each file shows: data whose every file is empty, a .parquet file
    that is none or was cut short (its magic bytes), and the text field in each .jsonl/.json file's first row
    and each .parquet file's schema. The rest of every file is read by `train` before its ranks start
    (backends/runner/preflight.py), so a run folder is not written for data `train` would then refuse. A first
    line that is not JSON on its own, or a parquet footer pyarrow cannot read, is left to that check, which
    names its place."""
    sources = resolve_sources(patterns, flag) if patterns else []
    if sources and all(source.path.is_file() and source.path.stat().st_size == 0 for source in sources):
        raise UserInputError(no_text_message(", ".join(patterns), sources))
    for source in sources:
        try:
            if source.kind == "json":
                problem = _first_row_problem(source.path, text_field)
            elif source.kind == "parquet":
                problem = parquet_magic_problem(source.path) or parquet_column_problem(source.path, text_field)
            else:
                continue
        except Exception:  # noqa: BLE001 (unreadable or malformed: train's full check says how, in one line)
            continue
        if problem:
            raise UserInputError(problem)


def _first_row_problem(path: Path, field: str) -> str | None:
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if raw.strip():
                problem = value_problem(json.loads(raw), field)
                return f"{path}, line {number}: {problem}" if problem else None
    return None
