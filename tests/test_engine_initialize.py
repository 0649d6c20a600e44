"""backends.initialize on a GPU layout, with the cuda calls and the engine replaced by recorders.

The reference is the order docs/parallelism.md states: with tp or pp > 1 the model is
sharded on the host and parallelize moves only this rank's part (the whole
model may not fit one GPU), so initialize itself must never move it; without
tp/pp initialize moves the model. The plan's virtual_stages reach parallelize.
"""

from __future__ import annotations

import pytest
import torch

import backends
from planner.contract.engine_config import load_engine_config
from planner.errors import UserInputError


class _RecordingEngine:
    def __init__(self, model, settings, **kwargs):
        self.module, self.optimizer, self.lr_scheduler = model, None, None


@pytest.fixture
def recorded(monkeypatch):
    events: list[tuple] = []
    monkeypatch.setattr("backends.engine.initialize._init_distributed", lambda backend: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a CUDA machine, as far as initialize can tell
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: events.append(("set_device", index)))
    monkeypatch.setattr(
        torch.nn.Module, "cuda", lambda module, *args, **kwargs: events.append(("model.cuda",)) or module
    )
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda *args, **kwargs: 4)
    monkeypatch.setattr("backends.engine.engine.Engine", _RecordingEngine)

    def parallelize(model, dims, **kwargs):
        events.append(("parallelize", dims, kwargs))
        groups = type("Groups", (), {"dp_group": None, "data_parallel_group": None})()
        return type("Parallel", (), {"groups": groups, "context_parallel": None, "expert_parallel": None})()

    monkeypatch.setattr("backends.model_parallel.split.split_model", parallelize)
    return events


def _config(pipeline_schedule="1f1b", **layout):
    return {
        "hardware_selector": {
            "device": "cuda",
            "dist_backend": "nccl",
            "layout": layout,
            "pipeline_schedule": pipeline_schedule,
        }
    }


def test_pipeline_layout_is_sharded_on_the_host_and_gets_the_plans_virtual_stages(recorded):
    backends.initialize(
        model=torch.nn.Linear(2, 2),
        config=_config(dp=1, tp=2, pp=2, pipeline_schedule="interleaved-1f1b", virtual_stages=3),
    )
    assert ("model.cuda",) not in recorded
    ((_, dims, kwargs),) = [event for event in recorded if event[0] == "parallelize"]
    assert (dims.dp, dims.tp, dims.pp) == (1, 2, 2)
    assert kwargs["virtual_stages"] == 3 and kwargs["device_type"] == "cuda"


def test_without_tp_or_pp_initialize_moves_the_model_itself(recorded):
    backends.initialize(model=torch.nn.Linear(2, 2), config=_config(dp=4))
    assert recorded == [("set_device", 0), ("model.cuda",)]


def test_virtual_stages_need_the_interleaved_schedule():
    with pytest.raises(UserInputError, match="virtual_stages 2 needs pipeline_schedule 'interleaved-1f1b'"):
        load_engine_config({"hardware_selector": {"layout": {"pp": 2, "virtual_stages": 2}}})


def test_compression_comes_from_our_key_or_deepspeeds_communication_data_type():
    assert load_engine_config({"hardware_selector": {"compression": "int8"}}).gradient_compression == "int8"
    assert load_engine_config({"communication_data_type": "bf16"}).gradient_compression == "bf16"
    assert load_engine_config({}).gradient_compression == "none"
    with pytest.raises(UserInputError, match="compression"):
        load_engine_config({"hardware_selector": {"compression": "1bit"}})
    with pytest.raises(
        UserInputError,
        match="communication_data_type 'fp16' and hardware_selector.compression 'int8' disagree; set one of them",
    ):
        load_engine_config({"communication_data_type": "fp16", "hardware_selector": {"compression": "int8"}})


@pytest.mark.parametrize(
    ("argument", "value", "message"),
    [
        ("training_data", 5, "training_data must be a map-style dataset"),
        ("model_parameters", 5, "model_parameters must be the model's parameters"),
        ("model_parameters", ["w"], "model_parameters must be the model's parameters"),
        ("collate_fn", 5, "collate_fn must be a function"),
        ("metrics_path", 123, "metrics_path must be a file path"),
    ],
)
def test_an_argument_of_another_kind_is_one_line_before_anything_is_built(argument, value, message):
    """training_data=5 and model_parameters=5 failed inside the DataLoader or a set comprehension (a TypeError
    from torch), metrics_path=123 inside open(); each is now refused by name first."""
    with pytest.raises(UserInputError, match=f"^{message}"):
        backends.initialize(model=torch.nn.Linear(2, 2), config={}, **{argument: value})
