"""planner/files.py: readers see the old file or the new one, never half; modes follow the umask."""

from __future__ import annotations

import re
import subprocess

import pytest

from planner.errors import UserInputError
from planner.files import atomic_path, check_writable, file_mode, write_json_atomic, write_text_atomic


def _umask() -> int:
    return int(subprocess.check_output(["sh", "-c", "umask"], text=True).strip(), 8)


def test_a_write_replaces_the_file_whole_with_an_ordinary_mode(tmp_path):
    target = tmp_path / "deep" / "plan.json"
    write_json_atomic(target, {"a": 1})
    write_text_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    assert target.stat().st_mode & 0o777 == 0o666 & ~_umask() == file_mode()
    script = write_text_atomic(tmp_path / "launch.sh", "#!/bin/sh\n", executable=True)
    assert script.stat().st_mode & 0o777 == 0o777 & ~_umask()
    assert sorted(p.name for p in target.parent.iterdir()) == ["plan.json"]  # no temporary left


def test_a_writer_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "tokens.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="tokenizer died"), atomic_path(target) as temporary:
        temporary.write_bytes(b"half of the ne")
        raise RuntimeError("tokenizer died")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["tokens.bin"]


def test_an_unwritable_place_is_a_user_error_naming_the_path(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserInputError, match=r"cannot write .*/file/sub/out.json: .*/file is a file, not a folder"):
        write_text_atomic(tmp_path / "file" / "sub" / "out.json", "{}")
    with pytest.raises(UserInputError, match=r"cannot write /proc/nope/out.json: "):
        write_text_atomic("/proc/nope/out.json", "{}")


def test_check_writable_refuses_what_a_later_write_could_not_do(tmp_path):
    """An empty name ('.' once it is a Path), a link to nothing and /proc (where even root makes no file) are
    one line before the command prints, not an error after it (run-training-benchmark --output)."""
    (tmp_path / "gone.json").symlink_to(tmp_path / "missing" / "out.json")
    for path, message in (
        ("", "cannot write .: it is a folder"),
        ("  ", "it names no file"),
        (tmp_path / "gone.json", "it links to "),
        ("/proc/out.json", "cannot write /proc/out.json"),
    ):
        with pytest.raises(UserInputError, match=re.escape(message)):
            check_writable(path)
    assert check_writable(tmp_path / "new" / "out.json") == tmp_path / "new" / "out.json"
