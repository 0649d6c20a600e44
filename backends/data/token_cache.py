"""Tokenize a corpus once into a flat token file beside the run, keyed by the hash of what it came from.

    RUN_DIR/data/tokens-<key>.bin    the documents' tokens, end to end, an EOS after each document
    RUN_DIR/data/tokens-<key>.json   dtype, token and document counts, sources, tokenizer: written last

The key hashes the bytes of every source file and of the tokenizer's files
plus the reading options, so an edited corpus or another tokenizer never
reuses a stale file, and an unchanged one is never tokenized twice.

One process per node tokenizes (local rank 0); the node's other ranks wait
for the .json (or an .error file carrying the one-line reason) and then map
the file read-only. The tokens are appended a batch of pieces at a time (a
document longer than a piece is tokenized in pieces: pieces.py, encode.py),
so memory stays flat whatever the corpus or a document's size. Written to a temporary name
and renamed: a crash never leaves a half file under the final name. The .json
records the file's size and a digest of its first and last MiB: a cache that
no longer matches (truncated, overwritten) is tokenized again, never mapped.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backends.data.documents import iter_documents
from backends.data.encode import DocumentTokens
from planner.errors import UserInputError
from planner.files import atomic_path, write_text_atomic
from planner.progress import WorkProgress
from planner.rundir.data_sources import Source

FORMAT_VERSION = 2  # 2: long documents tokenized in pieces, one EOS per document (backends/data/encode.py)
WAIT_REPORT_S = 60.0
EDGE_BYTES = 1 << 20  # the digest reads this much from each end: seconds saved on a large cache at every start


def edge_digest(path: Path) -> str:
    """A digest of the file's size, first and last MiB (not a full hash: the file may be many GB)."""
    digest = hashlib.blake2b(digest_size=16)
    size = path.stat().st_size
    digest.update(str(size).encode())
    with open(path, "rb") as handle:
        digest.update(handle.read(EDGE_BYTES))
        handle.seek(max(0, size - EDGE_BYTES))
        digest.update(handle.read(EDGE_BYTES))
    return digest.hexdigest()


def cache_intact(bin_path: Path, meta: dict[str, Any]) -> bool:
    """The token file is the one its .json describes: its size, and its edge digest when recorded."""
    import numpy as np

    if not bin_path.is_file():
        return False
    if bin_path.stat().st_size != int(meta["tokens"]) * np.dtype(meta["dtype"]).itemsize:
        return False
    return "edge_digest" not in meta or meta["edge_digest"] == edge_digest(bin_path)


def content_key(sources: list[Source], tokenizer_files: list[Path], options: dict[str, Any]) -> str:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(json.dumps({"format": FORMAT_VERSION, **options}, sort_keys=True).encode())
    for label, files in (("source", [f for s in sources for f in s.files()]), ("tokenizer", tokenizer_files)):
        for path in files:
            digest.update(f"{label}:{path.name}:{path.stat().st_size}".encode())
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


def token_dtype(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def write_token_file(
    bin_path: Path,
    sources: list[Source],
    tokenizer: Any,
    *,
    text_field: str,
    text_unit: str,
    eos_id: int,
    dtype: str,
) -> dict[str, Any]:
    """Tokenize every document into bin_path (atomically), a batch of pieces at a time; returns the metadata."""
    import numpy as np

    encode = DocumentTokens(tokenizer, eos_id)
    tokens = documents = 0
    size = sum(path.stat().st_size for source in sources for path in source.files())
    # The bar counts characters read against the files' bytes: exact for ASCII text, an estimate for the rest.
    progress = WorkProgress(f"tokenizing {bin_path.stem}", total=size, unit="B")
    with atomic_path(bin_path) as temporary, open(temporary, "wb") as out, progress:
        for pieces in iter_documents(sources, text_field=text_field, text_unit=text_unit):
            progress.advance(sum(len(piece.text) for piece in pieces), note=f"{tokens:,} tokens")
            flat = np.asarray(encode(pieces), dtype=np.int64)
            if flat.size and int(flat.max()) >= np.iinfo(dtype).max:
                raise UserInputError(f"token id {int(flat.max())} does not fit {dtype}")
            out.write(flat.astype(dtype).tobytes())
            tokens += int(flat.size)
            documents += sum(piece.last for piece in pieces)
    return {
        "format": FORMAT_VERSION,
        "dtype": dtype,
        "tokens": tokens,
        "documents": documents,
        "eos_id": eos_id,
        "sources": [str(s.path) for s in sources],
        "text_field": text_field,
    }


def sources_read_before(cache_dir: Path, text_field: str) -> set[Path]:
    """The source files a token file in cache_dir was written from (with this text field) and that have not
    changed since: each was read whole without a problem, so `train` need not check it again."""
    read: set[Path] = set()
    for meta_path in cache_dir.glob("tokens-*.json"):
        try:
            meta, written = _read_meta(meta_path), meta_path.stat().st_mtime_ns
        except (OSError, ValueError):
            continue
        if not isinstance(meta, dict) or meta.get("text_field") != text_field:
            continue
        for name in meta.get("sources", []):
            path = Path(name)
            try:
                if path.is_file() and path.stat().st_mtime_ns <= written:
                    read.add(path)
            except OSError:
                continue
    return read


def prepare_token_file(
    cache_dir: Path, key: str, build: Callable[[Path], dict[str, Any]], *, builder: bool, label: str
) -> tuple[Path, dict[str, Any]]:
    """The (bin path, metadata) for `key`: built here when `builder`, else waited for (the builder's error too)."""
    bin_path = cache_dir / f"tokens-{key}.bin"
    meta_path = cache_dir / f"tokens-{key}.json"
    error_path = cache_dir / f"tokens-{key}.error"
    if builder:
        cache_dir.mkdir(parents=True, exist_ok=True)
        error_path.unlink(missing_ok=True)
        if meta_path.is_file() and not cache_intact(bin_path, _read_meta(meta_path)):
            print(f"note: the token cache {bin_path.name} does not match its record (damaged?); tokenizing again")
            meta_path.unlink()  # the node's other ranks wait for the new one
        if not meta_path.is_file():
            try:
                meta = build(bin_path)
            except UserInputError as failure:
                write_text_atomic(error_path, str(failure))
                raise
            meta["edge_digest"] = edge_digest(bin_path)
            write_text_atomic(meta_path, json.dumps(meta, indent=1))
    else:
        _wait_for(meta_path, error_path, label, since=time.time() - 1.0)
    return bin_path, _read_meta(meta_path)


def _read_meta(meta_path: Path) -> dict[str, Any]:
    return json.loads(meta_path.read_text(encoding="utf-8"))


def _ready(meta_path: Path, bin_path: Path) -> bool:
    try:
        return cache_intact(bin_path, _read_meta(meta_path))
    except (OSError, ValueError, KeyError):  # the builder is replacing a damaged cache right now
        return False


def _wait_for(meta_path: Path, error_path: Path, label: str, *, since: float) -> None:
    """Until the builder's .json appears over an intact file, or its .error (one written by this run)."""
    began = reported = time.monotonic()
    bin_path = meta_path.with_suffix(".bin")
    while not _ready(meta_path, bin_path):
        if error_path.is_file() and error_path.stat().st_mtime >= since:
            raise UserInputError(error_path.read_text(encoding="utf-8").strip())
        time.sleep(0.2)
        if time.monotonic() - reported > WAIT_REPORT_S:
            reported = time.monotonic()
            print(
                f"waiting for this node's first rank to tokenize {label} ({time.monotonic() - began:.0f} s)", flush=True
            )


def open_tokens(bin_path: Path, meta: dict[str, Any]) -> Any:
    """The token file as a read-only numpy memmap (pages come from disk on demand)."""
    import numpy as np

    if meta["tokens"] == 0:
        return np.zeros(0, dtype=meta["dtype"])
    return np.memmap(bin_path, dtype=meta["dtype"], mode="r", shape=(meta["tokens"],))
