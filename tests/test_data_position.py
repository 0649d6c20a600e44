"""A checkpoint's data position (backends/runner/checkpoints.py): what it counts in is read once, and a resume on
changed data is refused naming what changed.

The reference is the identity data_identity reads from the files themselves; the refusals are checked word for
word against the flag or file that changed, since a line that blamed the training files for a new --eval-data sent
users looking in the wrong place.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import backends.runner.loop as loop
from backends.runner.checkpoints import check_data_position, data_identity
from planner.contract.run_config import DataConfig
from planner.errors import UserInputError


def _data(tmp_path: Path, **fields) -> DataConfig:
    corpus = tmp_path / "a.txt"
    if not corpus.exists():
        corpus.write_text("some words to train on\n" * 20)
    return DataConfig(train=[str(corpus)], **fields)


def _refusal(tmp_path: Path, saved: dict, now: dict) -> str:
    with pytest.raises(UserInputError) as refused:
        check_data_position({"saved_under": {"data": saved}, "samples": 16}, folder=tmp_path, data=now, reset=False)
    line = str(refused.value)
    assert "\n" not in line and "stands at sample 16" in line and "--reset-data-position" in line
    return line


def test_the_same_data_resumes_and_a_reset_says_where_the_position_stood(tmp_path):
    identity = data_identity(_data(tmp_path), 64)
    state = {"saved_under": {"data": identity}, "samples": 16}
    assert check_data_position(state, folder=tmp_path, data=data_identity(_data(tmp_path), 64), reset=False) is None
    other = data_identity(_data(tmp_path, seed=7), 64)
    note = check_data_position(state, folder=tmp_path, data=other, reset=True)
    assert note is not None and "stood at sample 16" in note


def test_a_grown_file_is_refused_as_changed_files(tmp_path):
    before = data_identity(_data(tmp_path), 64)
    with (tmp_path / "a.txt").open("a") as handle:
        handle.write("more\n")
    line = _refusal(tmp_path, before, data_identity(_data(tmp_path), 64))
    assert "has changed since (its files or their sizes)" in line


@pytest.mark.parametrize(
    ("changed", "flag"),
    [({"seed": 7}, "--seed"), ({"eval_fraction": 0.2}, "--eval-fraction"), ({"text_unit": "line"}, "--text-unit")],
)
def test_other_reading_settings_are_refused_naming_the_flag_not_the_files(tmp_path, changed, flag):
    line = _refusal(tmp_path, data_identity(_data(tmp_path), 64), data_identity(_data(tmp_path, **changed), 64))
    assert f"reads it with another {flag} setting" in line and "has changed since" not in line


def test_another_block_length_or_split_cap_is_refused_naming_it(tmp_path):
    # The position counts blocks of --seq-len tokens, and eval_max_blocks decides which blocks are held out: either
    # changed, "sample 16" points elsewhere in the same files.
    saved = data_identity(_data(tmp_path), 64)
    assert "another --seq-len setting" in _refusal(tmp_path, saved, data_identity(_data(tmp_path), 128))
    capped = data_identity(_data(tmp_path, eval_max_blocks=10), 64)
    assert "another data.eval_max_blocks (run.json) setting" in _refusal(tmp_path, saved, capped)


def test_a_checkpoint_that_recorded_fewer_settings_resumes_on_the_same_data(tmp_path):
    # Checkpoints saved before the block length and split cap were recorded carry the first five settings.
    now = data_identity(_data(tmp_path), 64)
    older = {**now, "read": now["read"][:5]}
    state = {"saved_under": {"data": older}, "samples": 16}
    assert check_data_position(state, folder=tmp_path, data=now, reset=False) is None
    assert "--seed" in _refusal(tmp_path, older, data_identity(_data(tmp_path, seed=3), 64))


def test_a_separate_eval_set_is_named_as_the_change(tmp_path):
    (tmp_path / "held_out.txt").write_text("held out words\n" * 5)
    now = data_identity(_data(tmp_path, eval=[str(tmp_path / "held_out.txt")]), 64)
    assert "another --eval-data setting" in _refusal(tmp_path, data_identity(_data(tmp_path), 64), now)


def test_other_training_files_are_named(tmp_path):
    (tmp_path / "b.txt").write_text("other words\n" * 20)
    now = data_identity(DataConfig(train=[str(tmp_path / "b.txt")]), 64)
    assert "this run trains on" in _refusal(tmp_path, data_identity(_data(tmp_path), 64), now)


def test_a_checkpoint_records_the_identity_read_at_the_start_not_the_files_as_they_are_at_the_save(
    tmp_path, monkeypatch
):
    # A data file removed mid-run made every later save fail (data_identity raises for a missing file), and a grown
    # one was recorded as what the run had read; the ranks train from the token cache built at the start.
    data = _data(tmp_path)
    at_start = data_identity(data, 64)
    (tmp_path / "a.txt").unlink()
    with pytest.raises(UserInputError):
        data_identity(data, 64)  # what the save computed before
    saved: dict = {}
    session = SimpleNamespace(
        run=SimpleNamespace(model=SimpleNamespace(name="m"), global_batch=4, layout=SimpleNamespace(describe=str)),
        fingerprint="f",
        plan_digest="d",
        spec=SimpleNamespace(strategy=SimpleNamespace(value="ddp"), run_dir=tmp_path),
        samples=8,
        guard=SimpleNamespace(state_dict=dict),
        data_identity=at_start,
        checkpoints=SimpleNamespace(save=lambda adapter, at, state: saved.update(state) or tmp_path / "ckpt"),
        adapter=None,
        status=SimpleNamespace(update=lambda **fields: None),
    )
    monkeypatch.setattr(loop, "saved_layout", lambda spec, run: {})
    assert loop.RunSession.save(session, 2) == tmp_path / "ckpt"
    assert saved["saved_under"]["data"] == at_start and saved["step"] == 2
