"""An error's advice names what the asker can type: the Python API's caller reads its keywords (force=True,
gpu='L4', gpus_per_node=2), a command line's user its flags (--force, --gpu L4, --gpu-count).

The reference is each line written out in full, for both doors of the same mistake."""

from __future__ import annotations

import pytest

import hardware_selector
from planner.errors import UserInputError


def _cli_error(capsys, *argv: str) -> str:
    assert hardware_selector.main(list(argv)) == 2
    return capsys.readouterr().err.strip()


def test_serving_on_a_cpu_names_the_gpu_keyword_in_the_api_and_the_flag_on_the_command_line(capsys):
    with pytest.raises(UserInputError) as refused:
        hardware_selector.get_inference_config("text_generation", "gpt2", gpu="cpu")
    why = "cpu has no bf16 or fp16 matmuls, and every serving format computes in them (or fp8); plan serving on a GPU"
    assert str(refused.value) == f"{why}, e.g. gpu='L4' or gpu='H100-80GB'"
    seed = ("--model-family", "text_generation", "--model-name", "gpt2", "--gpu", "cpu", "--mode", "inference")
    assert _cli_error(capsys, *seed) == f"error: {why}, e.g. --gpu L4 or --gpu H100-80GB"


def test_a_gpu_count_that_is_no_whole_number_of_the_given_nodes_says_the_fix_not_to_pass_what_was_passed():
    with pytest.raises(UserInputError) as refused:
        hardware_selector.get_distributed_training_config("text_generation", "gpt2", gpu_count=2, gpus_per_node=8)
    assert str(refused.value) == (
        "gpu_count=2 is not a whole number of nodes of gpus_per_node=8: make gpu_count a multiple of 8, "
        "or pass gpus_per_node=2 for one node of 2"
    )
    with pytest.raises(UserInputError) as refused:
        hardware_selector.get_inference_config("text_generation", "gpt2", gpu_count=12, gpus_per_node=8)
    assert (
        str(refused.value)
        == "gpu_count=12 is not a whole number of nodes of gpus_per_node=8: make gpu_count a multiple of 8"
    )


def test_a_gpu_count_that_is_no_whole_number_of_default_nodes(capsys):
    with pytest.raises(UserInputError) as refused:
        hardware_selector.get_distributed_training_config("text_generation", "gpt2", gpu_count=12)
    assert str(refused.value) == (
        "gpu_count=12 is not a whole number of nodes of 8 GPUs (the default node); pass gpus_per_node that divides "
        "it, or give a multiple of 8"
    )
    # The seed command line has no flag for the node size: it is told only what it can change.
    seed = ("--model-family", "text_generation", "--model-name", "gpt2", "--distributed", "--gpu-count", "12")
    assert _cli_error(capsys, *seed) == (
        "error: --gpu-count 12 is not a whole number of nodes of 8 GPUs (the default node); give a multiple of 8"
    )


def test_a_model_of_another_family_names_the_keyword_in_the_api():
    with pytest.raises(UserInputError, match=r"not a 'image_classification' model; check model_family$"):
        hardware_selector.get_distributed_training_config("image_classification", "gpt2", gpu_count=1)


def test_a_memory_beyond_the_catalog_is_named_as_each_door_spells_it(capsys):
    with pytest.raises(UserInputError) as refused:
        hardware_selector.get_inference_config("text_generation", "gpt2", max_memory_gb=500)
    assert str(refused.value) == "max_memory_gb=500 exceeds every catalog GPU (largest: B300)"
    seed = ("--model-family", "text_generation", "--model-name", "gpt2", "--max-memory-gb", "500", "--mode", "training")
    assert _cli_error(capsys, *seed) == "error: --max-memory-gb 500 exceeds every catalog GPU (largest: B300)"
