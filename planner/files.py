"""Write a file so that readers see the old content or the new, never half of it.

The one home of atomic writes for the whole project (docs/architecture.md):
plans, run folders, checkpoints, token caches, metrics, status files,
benchmark exports and results. A writer gets a hidden temporary file beside
the target (same file system, so the final step is a rename), and only a
complete, flushed file replaces the target. A crash or an exception leaves
the old file untouched and removes the temporary one.

New files get the ordinary mode the user's umask allows (0644 under the
usual 022), not mkstemp's private 0600: results and run folders are shared.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from planner.errors import UserInputError


def _read_umask() -> int:
    # os.umask can only be read by setting it; done once, at import, before any writer thread exists.
    current = os.umask(0)
    os.umask(current)
    return current


_UMASK = _read_umask()


def file_mode(*, executable: bool = False) -> int:
    """The mode a new file gets from open() under this process's umask."""
    return (0o777 if executable else 0o666) & ~_UMASK


def _cannot_write(target: Path, error: OSError) -> UserInputError:
    blocking = next((folder for folder in target.parents if folder.is_file()), None)
    if blocking is not None:  # mkdir says "File exists" or "Not a directory"; this says which file is in the way
        return UserInputError(
            f"cannot write {target}: {blocking} is a file, not a folder; move that file aside or choose another path"
        )
    reason = error.strerror or str(error)
    return UserInputError(f"cannot write {target}: {reason}; choose a writable location with free space")


def check_writable(path: str | Path) -> Path:
    """Fail now, in atomic_path's words, when `path` could not be written later (it names no file, links to
    nothing, is a folder, a file stands where one of its folders should be, its nearest existing folder refuses a
    new file, as /proc does even root): for a command that prints before it writes. A probe file is made and removed there; no folder is created."""
    target = Path(path)
    if target.is_dir():  # an empty path too: it is '.' once a Path
        raise UserInputError(f"cannot write {target}: it is a folder; name a file")
    if not target.name.strip():
        raise UserInputError(f"cannot write {str(path)!r}: it names no file; name a file")
    if target.is_symlink() and not target.exists():  # open() would follow the link into a missing folder
        raise UserInputError(f"cannot write {target}: it links to {os.readlink(target)}, which does not exist; "
                             "fix the link or name another file")  # fmt: skip
    folder = next(ancestor for ancestor in (target.parent, *target.parent.parents) if ancestor.exists())
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{target.name}.", suffix=".probe"):
            pass
    except OSError as error:
        raise _cannot_write(target, error) from None
    return target


@contextmanager
def atomic_path(path: str | Path, *, executable: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside `path`; once the block ends normally, it replaces `path`.

    For writers that want a path of their own (safetensors, DuckDB COPY, a
    token stream): write the whole file to the yielded path inside the block.
    A location that cannot be written (missing, read-only, a file where a
    folder should be, a full disk) is a UserInputError naming the path.
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        os.close(handle)
    except OSError as error:
        raise _cannot_write(target, error) from None
    temporary = Path(name)
    try:
        yield temporary
        try:
            with open(temporary, "rb") as written:
                os.fsync(written.fileno())  # the bytes are on disk before the name points at them
            os.chmod(temporary, file_mode(executable=executable))
            os.replace(temporary, target)
        except OSError as error:
            raise _cannot_write(target, error) from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str, *, executable: bool = False) -> Path:
    """Write `text` (UTF-8, '\\n' line ends) to `path` atomically; returns `path`."""
    with atomic_path(path, executable=executable) as temporary:
        try:
            temporary.write_text(text, encoding="utf-8", newline="\n")
        except OSError as error:
            raise _cannot_write(Path(path), error) from None
    return Path(path)


def write_json_atomic(path: str | Path, document: object, *, indent: int = 2) -> Path:
    """Write `document` as JSON (non-JSON values as their str) atomically; returns `path`."""
    return write_text_atomic(path, json.dumps(document, indent=indent, default=str) + "\n")
