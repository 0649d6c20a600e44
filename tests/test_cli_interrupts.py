"""Ctrl-C (or SIGTERM) during `train`'s checks, or at any point of `tune`: one `interrupted:` line, exit code 130
(143), nothing written (docs/running.md, "Run status").

Found by an audit: a SIGINT before torchrun started ended `train` in typer's silent exit 130 (click's "Aborted!"
and exit 1 before it), unlike the one line a Ctrl-C after the launch gives. The signal is real: the slow step
sends SIGINT to this process, and Python's own handler turns it into the KeyboardInterrupt a terminal's Ctrl-C
raises; no torchrun is launched.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from backends.runner.run_lock import LOCK_FILE
from hardware_selector_cli.app import main


def _ctrl_c(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)  # a slow step: Python's handler raises KeyboardInterrupt in it at once
    raise AssertionError("SIGINT did not interrupt")


def _sigterm(*args, **kwargs):
    """`kill PID` or a scheduler's time limit: without a handler it ended the process with nothing said."""
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
    raise AssertionError("SIGTERM did not interrupt")


SIGNALS = [(_ctrl_c, "SIGINT", 130), (_sigterm, "SIGTERM", 143)]


def _tree(folder):
    return sorted((path.relative_to(folder).as_posix(), path.stat().st_size) for path in folder.rglob("*"))


def emit_folder(folder, capsys):
    """A DDP run folder of the catalog's gpt2 on 2 CPU processes (tests/test_interrupted_resume_point.py too)."""
    plan = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "64", "--strategies", "ddp"]
    assert main([*plan, "--emit", str(folder)]) == 0
    capsys.readouterr()
    return folder


@pytest.fixture()
def run_dir(tmp_path, capsys):
    return emit_folder(tmp_path / "run", capsys)


@pytest.mark.parametrize(("send", "name", "exit_code"), SIGNALS)
@pytest.mark.parametrize("step", ["preflight", "check_resume"])
def test_ctrl_c_during_trains_checks_is_one_line_and_130(run_dir, capsys, monkeypatch, step, send, name, exit_code):
    """The data/tokenizer pre-flight reads only; the resume check runs with the run lock held (let go as the
    process ends): either way the folder is as it was and the next `train` starts where this one would have."""
    import backends.runner.preflight as preflight

    before = _tree(run_dir)
    monkeypatch.setattr(preflight, step, send)
    handler = signal.getsignal(signal.SIGTERM)
    assert main(["train", str(run_dir), "--tiny", "--steps", "1"]) == exit_code
    assert signal.getsignal(signal.SIGTERM) == handler  # put back as it was
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"interrupted: {name} during train's checks, before torchrun started; nothing ran, and the next "
        "`hardware-selector train` starts where this one would have"
    ]
    after = [entry for entry in _tree(run_dir) if entry[0] != LOCK_FILE]  # the lock's file stays, let go
    assert after == before and not (run_dir / "logs").exists() and not (run_dir / "run_status.json").exists()
    monkeypatch.undo()
    assert main(["train", str(run_dir), "--tiny", "--steps", "1", "--dry-run"]) == 0  # the lock was let go


@pytest.mark.parametrize(("send", "name", "exit_code"), SIGNALS)
def test_ctrl_c_during_a_tune_is_one_line_and_130(run_dir, capsys, monkeypatch, tmp_path, send, name, exit_code):
    import benchmarks.harness.tune as harness

    monkeypatch.setattr(harness, "run_tune", send)
    before = _tree(run_dir)
    code = main(["tune", str(run_dir), "--tiny", "--candidates", "1", "--db", str(tmp_path / "db.duckdb")])
    assert code == exit_code
    assert capsys.readouterr().err.splitlines() == [
        f"interrupted: {name}; run the same `hardware-selector tune` again to resume: the trials that ended are "
        "read back, not measured again (--remeasure measures them anew)"
    ]
    # The folder as it was but the run lock's file, which the tune held while it measured (let go when it ended).
    assert [entry for entry in _tree(run_dir) if entry[0] != LOCK_FILE] == before
    assert main(["train", str(run_dir), "--tiny", "--steps", "1", "--dry-run"]) == 0  # the lock was let go
