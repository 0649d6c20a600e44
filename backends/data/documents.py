"""Find a run's text files and read them as a stream of documents, through `datasets`, never downloading.

Accepted (docs/running.md):
- `.txt` files: one document per paragraph (blank-line separated) by default, or per line, or per file;
- `.jsonl` / `.json` and `.parquet` files: one document per row, its text in `text_field`;
- a folder written by `datasets.Dataset.save_to_disk` (or a DatasetDict's "train" split);
- a folder of such files, or a glob of them.

Files are read in sorted order, each in streaming mode (a chunk at a time), so a
corpus larger than RAM goes through. Every problem a user can cause is a
UserInputError naming the file: nothing matches, an unknown extension, a
missing text field, a value that is not text.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import UserInputError

FORMATS = {".txt": "text", ".text": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
SAVED_DATASET_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
BATCH_ROWS = 1000
READ_CHUNK_BYTES = 1 << 20  # datasets reads text and JSON a chunk at a time: memory stays flat (its default is 10 MB)


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


def resolve_sources(patterns: list[str], flag: str = "--data") -> list[Source]:
    """Every source the patterns name, in a deterministic order; errors name the pattern."""
    sources: list[Source] = []
    for pattern in patterns:
        if not str(pattern).strip():  # '' would be the current folder, every JSON file under it included
            raise UserInputError(f"{flag} is empty; give a .txt, .jsonl or .parquet file, a glob of them, or a folder")
        matches = sorted(glob.glob(os.path.expanduser(pattern), recursive=True))
        if not matches:
            raise UserInputError(
                f"{flag} {pattern}: no such file or folder; give a .txt, .jsonl or .parquet file, "
                "a glob of them, or a folder written by datasets' save_to_disk"
            )
        found = [source for match in matches for source in _sources_at(Path(match), flag)]
        kinds = sorted({source.path.suffix.lower() or source.kind for source in found})
        if len({source.kind for source in found}) > 1:  # a folder of text beside configs, say: say which files
            raise UserInputError(
                f"{flag} {pattern} matches files of several kinds ({', '.join(kinds)}); name one kind per "
                "pattern, e.g. 'corpus/*.jsonl'"
            )
        sources += found
    if not sources:
        raise UserInputError(f"{flag} {' '.join(patterns)}: no .txt, .jsonl, .json or .parquet file there")
    return list(dict.fromkeys(sources))


def _sources_at(path: Path, flag: str) -> list[Source]:
    if is_saved_dataset(path):
        return [Source(path.resolve(), "saved")]
    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in FORMATS)
        return [Source(p.resolve(), FORMATS[p.suffix.lower()]) for p in found]
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise UserInputError(f"{flag} {path}: unknown file type '{path.suffix}'; use .txt, .jsonl, .json or .parquet")
    return [Source(path.resolve(), kind)]


def iter_documents(sources: list[Source], *, text_field: str, text_unit: str) -> Iterator[list[str]]:
    """Batches of non-empty documents, source after source."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # local files only: never reach the hub
    for source in sources:
        yield from _batches(source, text_field=text_field, text_unit=text_unit)


def _batches(source: Source, *, text_field: str, text_unit: str) -> Iterator[list[str]]:
    if source.kind == "saved":
        dataset = _load_saved(source.path)
        rows: Any = dataset.iter(batch_size=BATCH_ROWS)
        column = _check_column(source, list(dataset.column_names), text_field)
        for batch in rows:
            yield _texts(source, batch[column])
        return
    import datasets

    field = "text" if source.kind == "text" else text_field
    options: dict[str, Any] = {
        "text": {"sample_by": text_unit, "chunksize": READ_CHUNK_BYTES},
        "json": {"chunksize": READ_CHUNK_BYTES},
        "parquet": {"batch_size": BATCH_ROWS},
    }[source.kind]
    try:
        stream = datasets.load_dataset(
            source.kind, data_files=[str(source.path)], split="train", streaming=True, **options
        )
        pending: list[str] = []
        checked = False
        for row in stream:
            if not checked:
                _check_column(source, list(row), field)
                checked = True
            pending.append(_text(source, row[field]))
            if len(pending) >= BATCH_ROWS:
                yield [text for text in pending if text.strip()]
                pending = []
        if pending:
            yield [text for text in pending if text.strip()]
    except UserInputError:
        raise
    except (MemoryError, OSError) as error:
        if isinstance(error, MemoryError) or error.errno == 12:
            raise MemoryError(f"out of memory while reading {source.path}") from error
        raise UserInputError(f"{source.path}: cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise UserInputError(f"{source.path}: not UTF-8 text; convert it to UTF-8") from None
    except Exception as error:  # a malformed file surfaces as one of many pyarrow/json errors
        if "malloc" in str(error) or "memory" in str(error).lower():
            raise MemoryError(f"out of memory while reading {source.path}: {_first_line(error)}") from error
        if "JSON" in type(error).__name__ or "Arrow" in type(error).__name__ or isinstance(error, ValueError):
            raise UserInputError(f"{source.path}: cannot be read as {source.kind} ({_first_line(error)})") from None
        raise


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


def _text(source: Source, value: Any) -> str:
    if not isinstance(value, str):
        raise UserInputError(
            f"{source.path}: the text field holds {type(value).__name__}, not text; name a text field with --text-field"
        )
    return value


def _texts(source: Source, values: list[Any]) -> list[str]:
    return [text for text in (_text(source, value) for value in values) if text.strip()]


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0][:200] if text else type(error).__name__
