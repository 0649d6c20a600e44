"""Find a run's text files and read them as a stream of documents (in pieces), never downloading.

Accepted (docs/running.md):
- `.txt` files: one document per paragraph (blank-line separated) by default, or per line, or per file;
- `.jsonl` / `.json` and `.parquet` files: one document per row, its text in `text_field`;
- a folder written by `datasets.Dataset.save_to_disk` (or a DatasetDict's "train" split);
- a folder of such files, or a glob of them.

Files are read in sorted order, each a chunk at a time: `.txt` by open()
itself, the others through `datasets` in streaming mode. A document longer
than a piece comes as several pieces (pieces.py), so a corpus larger than RAM
and a document of any length go through in flat memory. Every problem a user
can cause is a UserInputError naming the file: nothing matches, an unknown
extension, files of several kinds (planner/rundir/data_sources.py, which emit checks too), a missing text field, a value that is not text, and the line or
row of a file that is not what its extension says (file_checks.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from backends.data.file_checks import first_line, json_problem, parquet_problem
from backends.data.pieces import Piece, pieces_of, split_stream
from planner.errors import UserInputError
from planner.rundir.data_sources import Source

BATCH_ROWS = 1000
BATCH_CHARS = 1 << 20  # a batch of pieces handed to the tokenizer holds at most about this much text
READ_CHUNK_BYTES = 1 << 20  # datasets reads JSON a chunk at a time: memory stays flat (its default is 10 MB)
READ_CHUNK_CHARS = 1 << 20  # and a .txt file is read this many characters at a time
SEPARATORS = {"paragraph": "\n\n", "line": "\n", "document": None}  # what ends a .txt file's document


def iter_documents(sources: list[Source], *, text_field: str, text_unit: str) -> Iterator[list[Piece]]:
    """Batches of the documents' pieces (pieces.py), source after source; blank documents left out."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # local files only: never reach the hub
    for source in sources:
        batch: list[Piece] = []
        chars = 0
        for piece in _pieces(source, text_field=text_field, text_unit=text_unit):
            batch.append(piece)
            chars += len(piece.text)
            if len(batch) >= BATCH_ROWS or chars >= BATCH_CHARS:
                yield batch
                batch, chars = [], 0
        if batch:
            yield batch


def _pieces(source: Source, *, text_field: str, text_unit: str) -> Iterator[Piece]:
    if source.kind == "text":
        yield from _text_file(source, text_unit)
        return
    rows = 0
    try:
        for value in _values(source, text_field):
            rows += 1
            yield from pieces_of(_text(source, value, rows, text_field))
    except UserInputError:
        raise
    except Exception as error:  # a malformed file surfaces as one of many pyarrow/json errors, or an OSError
        if isinstance(error, MemoryError) or "malloc" in str(error) or "memory" in str(error).lower():
            raise MemoryError(f"out of memory while reading {source.path}: {first_line(error)}") from error
        if (
            isinstance(error, (OSError, ValueError))
            or "JSON" in type(error).__name__
            or "Arrow" in type(error).__name__
        ):
            raise UserInputError(_malformed(source, text_field, rows, error)) from None
        raise


def _text_file(source: Source, text_unit: str) -> Iterator[Piece]:
    """A .txt file's documents, read a chunk at a time as open() reads text (UTF-8, universal newlines)."""
    try:
        with open(source.path, encoding="utf-8") as handle:
            yield from split_stream(iter(lambda: handle.read(READ_CHUNK_CHARS), ""), SEPARATORS[text_unit])
    except UnicodeDecodeError:
        raise UserInputError(f"{source.path}: not UTF-8 text; convert it to UTF-8") from None
    except (MemoryError, OSError) as error:
        _reading_failed(source, error)


def _values(source: Source, text_field: str) -> Iterator[Any]:
    """The text field's value of every row of a .jsonl, .json or .parquet file or a saved dataset."""
    if source.kind == "saved":
        dataset = _load_saved(source.path)
        column = _check_column(source, list(dataset.column_names), text_field)
        for batch in dataset.iter(batch_size=BATCH_ROWS):
            yield from batch[column]
        return
    if source.path.stat().st_size == 0:  # no rows; datasets' reader ends in a bare StopIteration on it
        return
    import datasets

    # datasets logs pyarrow's several-line message for a malformed JSON file; the reader's one line says it
    logging.getLogger("datasets.packaged_modules.json.json").setLevel(logging.CRITICAL)
    options: dict[str, Any] = {"chunksize": READ_CHUNK_BYTES} if source.kind == "json" else {"batch_size": BATCH_ROWS}
    stream = datasets.load_dataset(source.kind, data_files=[str(source.path)], split="train", streaming=True, **options)
    checked = False
    for row in stream:
        if not checked:
            _check_column(source, list(row), text_field)
            checked = True
        yield row[text_field]


def _reading_failed(source: Source, error: BaseException) -> NoReturn:
    if isinstance(error, MemoryError) or getattr(error, "errno", None) == 12:
        raise MemoryError(f"out of memory while reading {source.path}") from error
    raise UserInputError(
        f"{source.path}: cannot be read ({getattr(error, 'strerror', None) or first_line(error)})"
    ) from None


def _malformed(source: Source, field: str, rows: int, error: Exception) -> str:
    """The one line for a file pyarrow could not read: the line or row at fault, when the bytes show it."""
    checks = {"json": lambda: json_problem(source.path, field), "parquet": lambda: parquet_problem(source.path)}
    problem = checks[source.kind]() if source.kind in checks else None
    if problem:
        return problem
    if isinstance(error, OSError) and error.strerror:  # the file itself (permissions, a vanished mount)
        return f"{source.path}: cannot be read ({error.strerror})"
    where = f" after row {rows:,}" if rows else ""
    return f"{source.path}: cannot be read as {source.kind}{where} ({first_line(error)})"


def _load_saved(folder: Path) -> Any:
    import datasets

    loaded = datasets.load_from_disk(str(folder))
    if isinstance(loaded, datasets.DatasetDict):
        if "train" not in loaded:
            raise UserInputError(
                f"{folder}: a DatasetDict without a 'train' split (it has {', '.join(loaded)}); "
                "save the split you want with Dataset.save_to_disk"
            )
        loaded = loaded["train"]
    return loaded


def _check_column(source: Source, columns: list[str], field: str) -> str:
    if field not in columns:
        raise UserInputError(
            f"{source.path}: no '{field}' field (it has {', '.join(map(repr, columns)) or 'none'}); "
            "name the text field with --text-field"
        )
    return field


def _text(source: Source, value: Any, row: int, field: str) -> str:
    if isinstance(value, str):
        return value
    problem = json_problem(source.path, field) if source.kind == "json" else None
    kind = "null" if value is None else type(value).__name__
    raise UserInputError(
        problem
        or f"{source.path}, row {row:,}: the '{field}' field holds {kind}, not text; "
        "name a text field with --text-field"
    )
