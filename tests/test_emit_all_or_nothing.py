"""An emission is all or nothing: interrupted before its files are staged it leaves the folder as it was,
stopped while they are renamed in it is refused by `train` and finished by the next emission
(planner/rundir/write.py, planner/rundir/manifest.py)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from emit_plans import make_plan

from planner.rundir.write import emit_run_folder


def _interrupt_the_third_write(monkeypatch) -> list:
    """planner/rundir/write.py's writes, the third one stopped by Ctrl-C; returns the calls made."""
    import planner.rundir.write as write

    real, calls = write.write_text_atomic, []

    def interrupted(*args, **kwargs):
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(write, "write_text_atomic", interrupted)
    return calls


@pytest.mark.parametrize("exists", [False, True])
def test_an_emission_interrupted_mid_way_leaves_no_half_folder(tmp_path, monkeypatch, exists):
    """Ctrl-C between two files left plan.json and one config, no launch.sh: `train` ran it and --emit refused
    the folder as existing. A folder that was missing or empty is left as it was."""
    run_dir = tmp_path / "run"
    if exists:
        run_dir.mkdir()
    calls = _interrupt_the_third_write(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        emit_run_folder(make_plan(strategy="ddp"), run_dir)
    assert len(calls) == 3
    assert (run_dir.is_dir() and not any(run_dir.iterdir())) if exists else not run_dir.exists()


def _contents(folder):
    return {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}


def test_a_forced_emission_interrupted_mid_way_leaves_the_old_folder_whole(tmp_path, monkeypatch):
    """--force over a DeepSpeed folder, stopped at its third file: the folder is the DeepSpeed one, byte for byte
    (the reference: its files read before), not plan.json of one plan beside ds_config.json of the other."""
    run_dir = tmp_path / "run"
    emit_run_folder(make_plan(strategy="deepspeed", zero_stage=2), run_dir)
    before = _contents(run_dir)
    calls = _interrupt_the_third_write(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        emit_run_folder(make_plan(strategy="engine"), run_dir, force=True)
    assert len(calls) == 3
    assert _contents(run_dir) == before and {path.name for path in run_dir.iterdir()} == set(before)


def test_a_forced_emission_stopped_mid_swap_is_finished_by_the_next_and_refused_by_train_meanwhile(tmp_path):
    """Killed after every new file was staged, while the files were being renamed in: train refuses the mix in
    one line, and the next emission completes the swap. The reference: the same plan emitted into a fresh
    folder (the same file names, the same engine.json)."""
    import hardware_selector
    from planner.rundir.manifest import COMMITTED, STAGING, finish_emission

    run_dir, reference = tmp_path / "run", tmp_path / "reference"
    emit_run_folder(make_plan(strategy="deepspeed", zero_stage=2), run_dir)
    emit_run_folder(make_plan(strategy="engine"), reference)
    staging = run_dir / STAGING
    staging.mkdir()
    for path in reference.iterdir():  # a kill -9 in the middle of commit_staged: staged, marked, one file moved
        (staging / path.name).write_bytes(path.read_bytes())
    stale = sorted(set(_contents(run_dir)) - set(_contents(reference)))  # DeepSpeed's files the engine has not
    assert "ds_config.json" in stale
    (staging / COMMITTED).write_text(json.dumps(stale))
    (staging / "plan.json").replace(run_dir / "plan.json")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = hardware_selector.main(["train", str(run_dir), "--dry-run"])
    assert code == 2 and "was being re-emitted when it stopped" in err.getvalue(), err.getvalue()
    assert err.getvalue().count("\n") == 1
    assert finish_emission(run_dir)
    assert _contents(run_dir) == _contents(reference)
    assert {path.name for path in run_dir.iterdir()} == {path.name for path in reference.iterdir()}
