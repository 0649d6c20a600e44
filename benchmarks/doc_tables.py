"""Generated tables in docs/: replace the text between a table's two markers, or try it on a copy (--smoke).

benchmarks/memory/compare_memory.py and benchmarks/accuracy/per_stack_accuracy.py write their tables into
docs/accuracy.md with `--update-docs`; their `--smoke` runs write into a temporary copy, so the doc stays as
committed (tests/test_benchmark_smoke.py checks its bytes).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from planner.files import write_text_atomic


def replace_table(path: Path, start_marker: str, end_marker: str, table: str) -> None:
    """The table between the markers in `path`, written atomically; one line when the markers are missing."""
    text = path.read_text(encoding="utf-8")
    start, end = text.find(start_marker), text.find(end_marker)
    if start < 0 or end < start:
        raise SystemExit(f"{path}: no '{start_marker}' ... '{end_marker}' markers to replace")
    write_text_atomic(path, text[: start + len(start_marker)] + "\n" + table + "\n" + text[end:])


def smoke_replace(doc: Path, start_marker: str, end_marker: str, table: str) -> bool:
    """Whether the table lands between the markers of a temporary copy of `doc` (the doc is left alone);
    prints what it found."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / doc.name
        shutil.copyfile(doc, copy)
        replace_table(copy, start_marker, end_marker, table)
        written = table in copy.read_text(encoding="utf-8")
    print(f"smoke: the table {'was' if written else 'was NOT'} written into a temporary copy of docs/{doc.name}")
    return written
