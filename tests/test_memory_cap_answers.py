"""A max_memory_gb cap below a GPU's memory is named in the answer, and its suggestions keep to it: each is
planned again as printed, with the same cap, and must fit (the reference). Before, an answer capped at 2 GiB
suggested "at 2 GPUs, V100-16GB fits" (the uncapped part), and training listed catalog GPUs that fit only
without the cap."""

from __future__ import annotations

import re

from hardware_selector import get_distributed_training_config, get_inference_config

SERVING = dict(batch_size=1, weights="int4")


def test_a_capped_serving_answer_names_the_cap_and_every_suggestion_fits_under_it():
    answer = get_inference_config("text_generation", "llama-3-8b", gpu_count=2, max_memory_gb=2, **SERVING)
    assert not answer["fits"] and answer["gpu"] == "V100-16GB"
    assert answer["gpu_memory_cap"] == "V100-16GB capped at 2 GiB by max_memory_gb"
    assert answer["suggestions"] == ["8 x V100-16GB capped at 2 GiB (gpu_count=8, gpus_per_node=8) fits"]
    planned = get_inference_config(
        "text_generation", "llama-3-8b", gpu_count=8, gpus_per_node=8, max_memory_gb=2, **SERVING
    )
    assert planned["fits"] and planned["gpu_memory_cap"] == answer["gpu_memory_cap"]
    # What the old answer suggested instead, under the same cap: it does not fit.
    old_suggestion = get_inference_config(
        "text_generation", "llama-3-8b", gpu_count=2, gpu="V100-16GB", max_memory_gb=2, **SERVING
    )
    assert not old_suggestion["fits"]


def test_a_capped_training_answer_lists_no_catalog_gpu_that_fits_only_without_the_cap():
    call = dict(gpu_count=2, batch_size=1, calibrate=False)
    answer = get_distributed_training_config("text_generation", "llama-3-8b", max_memory_gb=1, **call)
    assert not answer["fits"] and answer["gpu_memory_cap"] == "V100-16GB capped at 1 GiB by max_memory_gb"
    assert answer["suggestions"][0].startswith("no count of V100-16GB capped at 1 GiB from 2 up to 1024 fits")
    assert not any("catalog GPUs fit" in line for line in answer["suggestions"])
    # The old answer's "these catalog GPUs fit: V100-PCIe-16GB, T4, ...": under the cap, the first does not.
    assert not get_distributed_training_config(
        "text_generation", "llama-3-8b", gpu="V100-PCIe-16GB", max_memory_gb=1, **call
    )["fits"]


def test_an_uncapped_answer_says_nothing_of_a_cap_and_still_suggests_larger_gpus():
    answer = get_inference_config("text_generation", "llama-3-8b", gpu="T4", batch_size=1)
    assert not answer["fits"] and "gpu_memory_cap" not in answer
    (larger,) = [line for line in answer["suggestions"] if re.match(r"at 1 GPU, \S+ fits \(", line)]
    gpu = larger.split(", ")[1].split(" fits (")[0]
    assert get_inference_config("text_generation", "llama-3-8b", gpu=gpu, batch_size=1)["fits"]
