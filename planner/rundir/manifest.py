"""Which files of a run folder this project wrote: `plan --emit --force` replaces those and no others.

The emitter lists every file it writes in `.hardware-selector-files`. Over an existing folder, a file it is
about to write that the list does not name (the user's own README.md, say) is moved to previous/<time>/ with
the previous run's state, never written over. A folder emitted before the list existed counts as ours when its
plan.json is one of ours.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from planner.files import write_text_atomic

MANIFEST = ".hardware-selector-files"


def _our_plan_json(path: Path) -> bool:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(document, dict) and "run" in document and "schema_version" in document


def files_of_ours(run_dir: Path, artifacts: Iterable[str]) -> set[str]:
    """Names of the folder's files this project wrote."""
    manifest = run_dir / MANIFEST
    if manifest.is_file():
        return set(manifest.read_text(encoding="utf-8").split())
    return set(artifacts) if _our_plan_json(run_dir / "plan.json") else set()


def foreign_files(run_dir: Path, names: Iterable[str], artifacts: Iterable[str]) -> list[str]:
    """Those of `names` present in the folder that this project did not write."""
    ours = files_of_ours(run_dir, artifacts)
    return sorted(name for name in names if (run_dir / name).exists() and name not in ours)


def write_manifest(run_dir: Path, names: Iterable[str]) -> Path:
    return write_text_atomic(run_dir / MANIFEST, "".join(f"{name}\n" for name in sorted(names)))
