"""On-disk layout of a checkpoint folder and what makes a checkpoint complete.

    SAVE_DIR/latest                 tag of the newest complete checkpoint (written atomically)
    SAVE_DIR/<tag>/shards/...       torch.distributed.checkpoint files (master weights, optimizer states)
    SAVE_DIR/<tag>/engine_state.json steps, data position, tp/pp layout, tp split of tensors; per tp/pp
                                     rank: ZeRO units, scheduler, loss scaler
    SAVE_DIR/<tag>/rng/rank<r>.pt   each rank's RNG states
    SAVE_DIR/<tag>/MANIFEST.json    size and sha256 of every file above: written last

Ranks write into SAVE_DIR/.partial-<tag>; rank 0 writes the manifest and then
renames the folder to <tag>. A crash mid-save leaves only a .partial folder,
and a file damaged later fails the manifest check, so neither is mistaken
for a complete checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from planner.errors import UserInputError
from planner.files import write_text_atomic

MANIFEST = "MANIFEST.json"
LATEST = "latest"
STEP_TAG = re.compile(r"global_step(\d+)$")


def checkpoint_folder(given: str | Path | None, config: Any, call: str) -> str | Path:
    """SAVE_DIR of engine.save_checkpoint / load_checkpoint: the folder given, else the engine config's
    hardware_selector.checkpoint.save_dir (a seed config's save_dir becomes it)."""
    folder = given if given is not None else config.hardware_selector.checkpoint.save_dir
    if folder is None:
        raise UserInputError(f"engine.{call} needs a folder: pass one, or set hardware_selector.checkpoint.save_dir")
    return folder


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def write_manifest(folder: Path) -> None:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)
    entries = {str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": _digest(p)} for p in files}
    write_text_atomic(folder / MANIFEST, json.dumps({"files": entries}, indent=1))


def verify(folder: Path) -> str | None:
    """None when the checkpoint is complete and intact, else a short reason."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return "no MANIFEST.json (the save did not finish)"
    try:
        entries = json.loads(manifest.read_text(encoding="utf-8"))["files"]
    except (ValueError, KeyError):
        return "MANIFEST.json is unreadable"
    for name, expected in entries.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != expected["bytes"]:
            return f"{name} has {path.stat().st_size} bytes, expected {expected['bytes']} (truncated?)"
        if _digest(path) != expected["sha256"]:
            return f"{name} does not match its checksum"
    return None


def step_of(tag: str) -> int:
    match = STEP_TAG.search(tag)
    return int(match.group(1)) if match else -1


def committed_tags(save_dir: Path) -> list[str]:
    """Tags that have a manifest, oldest first (by step, then modification time)."""
    if not save_dir.is_dir():
        return []
    tags = [p for p in save_dir.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST).is_file()]
    tags.sort(key=lambda p: (step_of(p.name), p.stat().st_mtime))
    return [p.name for p in tags]


def commit(save_dir: Path, partial: Path, tag: str, keep_last: int) -> Path:
    """Rank 0 only: seal `partial` as `tag`, point `latest` at it, drop all but the newest keep_last."""
    write_manifest(partial)
    final = save_dir / tag
    if final.exists():
        shutil.rmtree(final)
    os.replace(partial, final)
    write_text_atomic(save_dir / LATEST, tag)
    for old in committed_tags(save_dir)[:-keep_last]:
        if old != tag:
            shutil.rmtree(save_dir / old, ignore_errors=True)
    return final


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
