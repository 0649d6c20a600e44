"""The Python API's arguments: every keyword of every selector method and of training_arguments is taken or
refused by name in one sentence (a UserInputError, a ValueError or TypeError), never a pydantic dump or a
TypeError from deep inside (planner/selector/arguments.py, docs/selector.md, docs/integrations.md)."""

from __future__ import annotations

import math

import pytest
from emit_plans import make_plan
from hypothesis import given
from hypothesis import strategies as st
from test_fuzz_inputs import PROFILE, _finite, guard

from hardware_selector import HardwareSelector, get_distributed_training_config
from planner.errors import UserInputError

ARGUMENT_VALUES = st.sampled_from([None, "two", True, 10**40, -1, 0, 2.5, float("nan"), "lots", 123, 8])


@PROFILE
@given(
    argument=st.sampled_from(["gpu_count", "batch_size", "max_memory_gb", "model_name", "model_family"]),
    value=ARGUMENT_VALUES,
)
def test_the_python_api_returns_or_raises_a_value_or_type_error_naming_the_argument(argument, value):
    call = {"model_family": "text_generation", "model_name": "facebook/opt-1.3b", "gpu_count": 8, "batch_size": 4}
    call[argument] = value
    with guard():
        try:
            result = get_distributed_training_config(**call)
        except (ValueError, TypeError) as error:
            message = str(error)
            assert "\n" not in message and (argument in message or "model" in message), (argument, value, message)
            return
    assert isinstance(result, dict) and _finite({k: v for k, v in result.items() if k != "plan"})


OPTION_VALUES = st.sampled_from(
    [None, "yes", "True", "2048", 8.0, 0, -3, True, False, 5, [None], ["FSDP"], "fsdp", "H100-80GB", "bf16-mixed"]
)


@PROFILE
@given(
    option=st.sampled_from(
        [
            "gpus_per_node",
            "seq_len",
            "allow_engine",
            "strategies",
            "gpu",
            "precision",
            "objective",
            "batch_size",
            "nvme_gb",
            "nvme_gbps",
        ]
    ),
    value=OPTION_VALUES,
)
def test_every_keyword_of_the_python_api_is_taken_or_refused_by_name(option, value):
    """Strings for numbers, floats for counts, booleans as strings, a lone name for a list: each is a
    TypeError or ValueError naming the keyword, in one sentence, or a plan."""
    call = {"model_family": "text_generation", "model_name": "gpt2", "gpu_count": 2, "batch_size": 4, option: value}
    with guard():
        try:
            result = get_distributed_training_config(**call)
        except (ValueError, TypeError) as error:
            message = str(error)
            assert "\n" not in message and option.lower() in message.lower(), (option, value, message)
            return
    wrong_type = {
        "allow_engine": not isinstance(value, bool),
        "strategies": value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)),
        "seq_len": value is not None and (isinstance(value, bool) or not isinstance(value, int)),
        "gpus_per_node": value is not None and (isinstance(value, bool) or not isinstance(value, int)),
        "batch_size": value is not None and (isinstance(value, bool) or not isinstance(value, int)),
        "nvme_gb": value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))),
        "nvme_gbps": value is not None,  # a bandwidth without nvme_gb has no NVMe to describe
    }.get(option, False)
    assert not wrong_type, f"{option}={value!r} was taken"
    assert isinstance(result, dict)


SERVING_CALL = {"model_family": "text_generation", "model_name": "gpt2", "gpu_count": 1}
HARDWARE_CALL = {**SERVING_CALL, "candidates": ["A10"], "include_detected": False, "gpu_count": 2, "batch_size": 2}
METHOD_VALUES = st.sampled_from([None, "yes", "2048", 8.0, 0, -3, True, 5, [], ["A10"], "A10", "lots", float("inf")])


@PROFILE
@given(
    method=st.sampled_from(["get_inference_config", "select_hardware_for_task", "__init__"]),
    option=st.sampled_from(
        [
            "gpu_count",
            "batch_size",
            "max_memory_gb",
            "gpu",
            "gpus_per_node",
            "context",
            "output_tokens",
            "weights",
            "kv_cache",
            "objective",
            "task_type",
            "rank_by",
            "seq_len",
            "distributed",
            "candidates",
            "allow_engine",
            "include_detected",
            "headroom_fraction",
        ]  # fmt: skip
    ),
    value=METHOD_VALUES,
)
def test_every_keyword_of_every_selector_method_is_taken_or_refused_by_name(method, option, value):
    """get_inference_config took context="2048" into a TypeError from inside, context=-5 or objective="cheap"
    into a pydantic dump; select_hardware_for_task took seq_len="512" so. Each is now one sentence naming it."""
    import inspect

    function = getattr(HardwareSelector, method)
    if option not in inspect.signature(function).parameters:
        return
    with guard():
        try:
            if method == "__init__":
                HardwareSelector(**{option: value})
                return
            base = SERVING_CALL if method == "get_inference_config" else HARDWARE_CALL
            result = getattr(HardwareSelector(), method)(**{**base, option: value})
        except UserInputError as error:
            message = str(error)
            assert "\n" not in message and option.lower() in message.lower(), (method, option, value, message)
            return
    assert isinstance(result, dict) and _finite({k: v for k, v in result.items() if k != "plan"})


def test_a_selector_method_cannot_take_an_argument_nothing_checks():
    from planner.selector.arguments import checked_arguments

    with pytest.raises(TypeError, match="no rule for temperature"):

        @checked_arguments()
        def plan(model_name: str, temperature: float = 1.0) -> None: ...


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ({"output_dir": ""}, "output_dir must be the path of a folder"),
        ({"output_dir": 7}, "output_dir must be the path of a folder"),
        ({"nproc_override": "2"}, "nproc_override must be an int"),
        ({"nproc_override": True}, "nproc_override must be an int"),
        ({"nproc_override": 0}, "nproc_override must be at least 1, not 0"),
        ({"run": "fsdp"}, "run must be a RunConfig"),
        ({"bf16": "no"}, "bf16 must be True or False, not str 'no'"),
        ({"save_steps": -5}, "save_steps must be a finite number of at least 0, not -5"),
        ({"seed": -1}, "seed must be a finite number of at least 0"),
        ({"logging_steps": 0}, "TrainingArguments refused the overrides: logging strategy"),
        ({"learning_rate": math.inf}, "learning_rate must be a finite number from 1e-12 to 10, not inf"),
        ({"per_device_train_batchsize": 2}, "did you mean 'per_device_train_batch_size'?"),
    ],
)
def test_training_arguments_refuses_each_wrong_argument_by_name(tmp_path, call, message):
    from planner.rundir.training_arguments import training_arguments

    call = {"output_dir": tmp_path / "out", **call}
    with pytest.raises(UserInputError) as refused:
        training_arguments(make_plan(strategy="fsdp"), **call)
    assert message in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
