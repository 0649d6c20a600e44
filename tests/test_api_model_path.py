"""The selector takes a model's folder as a pathlib.Path (any os.PathLike) wherever it takes a model name, and
answers as for the same path given as a string (the reference); other types stay one line naming the argument."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import hardware_selector
from planner.errors import UserInputTypeError

TINY_GPT2 = {
    "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_layer": 2, "n_head": 4,
    "n_inner": 256, "vocab_size": 300, "n_positions": 128, "n_ctx": 128, "activation_function": "gelu_new",
    "tie_word_embeddings": True,
}  # fmt: skip


@pytest.fixture
def model_dir(tmp_path) -> Path:
    folder = tmp_path / "my-gpt2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_GPT2))
    return folder


def _same(answer: dict, reference: dict) -> None:
    assert answer.keys() == reference.keys()
    for key in ("fits", "gpu", "distributed_strategy", "per_gpu_batch_size", "estimated_memory"):
        assert answer.get(key) == reference.get(key)


def test_a_path_is_a_model_name_in_every_api_call(model_dir):
    options = dict(gpu_count=1, batch_size=2, gpu="A100-80GB", calibrate=False)
    reference = hardware_selector.get_distributed_training_config("text_generation", str(model_dir), **options)
    answer = hardware_selector.get_distributed_training_config("text_generation", model_dir, **options)
    _same(answer, reference)
    assert answer["plan"].model.name == reference["plan"].model.name == "my-gpt2"
    serving = dict(gpu="L4", batch_size=1)
    _same(
        hardware_selector.get_inference_config("text_generation", model_dir, **serving),
        hardware_selector.get_inference_config("text_generation", str(model_dir), **serving),
    )
    chosen = dict(gpu_count=1, candidates=["A100-80GB"], include_detected=False, calibrate=False)
    by_path = hardware_selector.select_hardware_for_task("text_generation", model_dir, **chosen)
    by_text = hardware_selector.select_hardware_for_task("text_generation", str(model_dir), **chosen)
    assert by_path["distributed_strategy"] == by_text["distributed_strategy"]
    assert by_path["estimates"].keys() == by_text["estimates"].keys() == {"A100-80GB"}


def test_other_types_are_still_one_line(model_dir):
    with pytest.raises(UserInputTypeError, match=r"^model_name must be a string or a path \(os.PathLike\), not 123$"):
        hardware_selector.get_distributed_training_config("text_generation", 123, gpu_count=1)
    with pytest.raises(UserInputTypeError, match=r"^model_name must be a str or a text path, not the bytes path"):
        hardware_selector.get_distributed_training_config("text_generation", _BytesPath(), gpu_count=1)


class _BytesPath:
    def __fspath__(self) -> bytes:
        return b"my-gpt2"
