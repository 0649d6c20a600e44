"""A checkpoint's safetensors files are checked at emit by their headers alone (8 bytes of little-endian length,
then that much JSON: the format's own layout, github.com/huggingface/safetensors), so a truncated or damaged
download is one line at `plan --emit` (and in tune's trial folders), not after the run folder is written and
`train` starts its ranks (docs/running.md, "Weights"; a new user's audit, 2026-11-30). The tensors themselves are
read by the ranks (backends/weights/source.py)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from planner.errors import UserInputError

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
MAX_HEADER_BYTES = 100_000_000  # safetensors' MAX_HEADER_SIZE


def check_weight_headers(folder: Path) -> None:
    """One line naming the first safetensors file of `folder` (its model.safetensors, or its index's shards) whose
    header does not read, or whose tensors run past the file's end; nothing when every one reads."""
    if (folder / INDEX).is_file():
        try:
            weight_map = json.loads((folder / INDEX).read_text(encoding="utf-8"))["weight_map"]
            names = sorted({name for name in weight_map.values() if isinstance(name, str)})
        except (ValueError, KeyError, TypeError, AttributeError):
            raise UserInputError(f"{folder / INDEX} is not a safetensors index (no weight_map)") from None
    elif (folder / SINGLE).is_file():
        names = [SINGLE]
    else:
        return
    for name in names:
        path = folder / name
        if path.is_file():  # a shard the index names but the folder lacks is said where the weights are read
            _check_header(path)


def _check_header(path: Path) -> None:
    size = path.stat().st_size
    try:
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if not 0 < length <= min(MAX_HEADER_BYTES, size - 8):
                raise ValueError(f"a header of {length:,} bytes in a file of {size:,}")
            header = json.loads(handle.read(length))
        if not isinstance(header, dict):
            raise ValueError("its header is no JSON object")
        ends = [int(entry["data_offsets"][1]) for key, entry in header.items() if key != "__metadata__"]
    except (OSError, ValueError, struct.error, KeyError, TypeError, IndexError, AttributeError) as error:
        raise UserInputError(
            f"{path} is not a readable safetensors file ({error or 'no header'}); copy the checkpoint again "
            "(a download cut short, say)"
        ) from None
    if ends and 8 + length + max(ends) > size:
        raise UserInputError(
            f"{path} is cut short: its tensors end at byte {8 + length + max(ends):,} of a {size:,}-byte file; copy "
            "the checkpoint again"
        )
