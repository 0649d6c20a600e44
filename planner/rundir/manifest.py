"""Which files of a run folder this project wrote: `plan --emit --force` replaces those and no others.

The emitter lists every file it writes in `.hardware-selector-files`. Over an existing folder, a file it is
about to write that the list does not name (the user's own README.md, say) is moved to previous/<time>/ with
the previous run's state, never written over. A folder emitted before the list existed counts as ours when its
plan.json is one of ours.

An emission is all or nothing: every file is first written whole into `.emit-staging/` inside the folder,
then a marker, `.emit-staging/COMMITTED`, names the old files to remove, and only then are the staged files
renamed into place. Interrupted before the marker, the folder holds the old files, untouched (the staging is
removed); after it, `finish_emission` completes the swap: the emitter calls it first, and `train` refuses a
folder left in between (`interrupted_emission`) instead of running a mix of two plans' files.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from planner.files import write_text_atomic

MANIFEST = ".hardware-selector-files"
STAGING = ".emit-staging"  # the new files, written whole before any old one is replaced
COMMITTED = "COMMITTED"  # in STAGING: every new file is there; lists the old files to remove


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


def commit_staged(run_dir: Path, remove: Iterable[str]) -> None:
    """Every file is in STAGING: mark the emission committed, then swap the files in (see the module's doc)."""
    write_text_atomic(run_dir / STAGING / COMMITTED, json.dumps(sorted(remove)))
    try:
        finish_emission(run_dir)
    except KeyboardInterrupt:  # Ctrl-C mid-swap: the swap is a few renames, so it is finished before stopping
        finish_emission(run_dir)
        raise


def finish_emission(run_dir: Path) -> bool:
    """Complete an emission whose files were all staged (True), or drop one that was not (its staging)."""
    staging = run_dir / STAGING
    if not staging.is_dir():
        return False
    marker = staging / COMMITTED
    if not marker.is_file():
        shutil.rmtree(staging)
        return False
    for entry in staging.iterdir():
        if entry.name != COMMITTED:
            os.replace(entry, run_dir / entry.name)  # the same folder: one rename each
    for name in json.loads(marker.read_text(encoding="utf-8")):
        (run_dir / name).unlink(missing_ok=True)
    marker.unlink()
    staging.rmdir()
    return True


def interrupted_emission(run_dir: Path) -> bool:
    """An emission stopped while swapping its files in: the folder may hold some old files and some new."""
    return (run_dir / STAGING / COMMITTED).is_file()
