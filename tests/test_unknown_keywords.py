"""A misspelt keyword argument of the Python API is one line naming it, its closest valid keyword and all of them
(planner/errors.py, known_keywords), not Python's bare "got an unexpected keyword argument"."""

from __future__ import annotations

import pytest

import backends
import hardware_selector
from planner.errors import UserInputError, known_keywords

CALLS = {
    "get_distributed_training_config": (
        lambda: hardware_selector.get_distributed_training_config("text_generation", "gpt2", 2, seqlen=128),
        "seqlen",
        "seq_len",
    ),
    "get_inference_config": (
        lambda: hardware_selector.get_inference_config("text_generation", "gpt2", batchsize=2),
        "batchsize",
        "batch_size",
    ),
    "select_hardware_for_task": (
        lambda: hardware_selector.select_hardware_for_task("text_generation", "gpt2", tasktype="training"),
        "tasktype",
        "task_type",
    ),
    "HardwareSelector": (lambda: hardware_selector.HardwareSelector(seqlen=128), "seqlen", "seq_len"),
    "emit_run_folder": (lambda: hardware_selector.emit_run_folder(None, "x", forse=True), "forse", "force"),
    "initialize": (lambda: backends.initialize(model=None, confg={}), "confg", "config"),
    "setup_distributed_training": (
        lambda: backends.setup_distributed_training(None, {}, datasets=[]),
        "datasets",
        "dataset",
    ),
    "CheckpointManager": (lambda: backends.CheckpointManager("ckpt", keep=2), "keep", "keep_last"),
    "CheckpointManager.save": (
        lambda: backends.CheckpointManager("ckpt").save(1, None, extras={}),
        "extras",
        "extra",
    ),
    "ParallelTrainer.train": (
        lambda: backends.ParallelTrainer({}).train(None, [1], epoch=2),
        "epoch",
        "epochs",
    ),
}


@pytest.mark.parametrize("name", CALLS)
def test_a_misspelt_keyword_names_itself_its_closest_valid_one_and_all_of_them(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # CheckpointManager("ckpt") must not create anything anywhere else
    call, keyword, closest = CALLS[name]
    with pytest.raises(UserInputError) as raised:
        call()
    message = str(raised.value)
    assert isinstance(raised.value, TypeError)  # still a TypeError, as Python's own, for code that catches that
    assert "\n" not in message
    assert f"no keyword {keyword!r}" in message and f"did you mean {closest!r}?" in message, message
    assert "its keywords are " in message and closest in message.split("its keywords are ")[1]
    assert not any(tmp_path.iterdir())  # refused before anything was done


def test_no_close_keyword_lists_them_all_without_a_guess():
    @known_keywords
    def plan(model: str, *, gpus: int = 1) -> str:
        return model

    assert plan("gpt2", gpus=2) == "gpt2"
    with pytest.raises(UserInputError, match=r"^plan\(\) takes no keyword 'zzz'; its keywords are model, gpus$"):
        plan("gpt2", zzz=1)
