"""The Python API of the replaced tool: get_distributed_training_config and select_hardware_for_task."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hardware_selector import HardwareSelector, get_distributed_training_config
from planner.errors import UserInputError
from planner.plan import Plan

REPO_ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30


def test_distributed_training_config_has_the_documented_keys_and_the_typed_plan():
    config = get_distributed_training_config(
        "text_generation", "llama-7b", gpu_count=8, batch_size=16, max_memory_gb=24
    )
    assert config["fits"] is True
    assert config["distributed_strategy"] in ("DDP", "FSDP", "DeepSpeed", "engine")
    # batch_size is per GPU: the effective batch is 16 x 8, however the plan splits it.
    assert config["gpu_count"] == 8 and config["effective_batch_size"] == config["global_batch_size"] == 16 * 8
    plan = config["plan"]
    assert isinstance(plan, Plan)
    dp = plan.layout.dp
    assert config["per_gpu_batch_size"] * config["gradient_accumulation_steps"] * dp == 16 * 8
    assert config["mixed_precision"] is True and config["mixed_precision_dtype"] in ("bf16", "fp16")
    assert isinstance(config["gradient_checkpointing"], bool)
    memory = config["estimated_memory"]
    for key in ("parameters_gb", "gradients_gb", "optimizer_gb", "activations_gb", "per_gpu_gb"):
        assert memory[key] >= 0
    assert memory["per_gpu_gb"] == pytest.approx(plan.memory.total / GIB, abs=1e-3)
    # max_memory_gb=24 means a 24 GiB GPU: the plan fits in it.
    assert plan.cluster.gpu.memory_bytes == 24 * GIB and memory["per_gpu_gb"] <= 24
    strategy_block = {"DeepSpeed": "deepspeed_config", "FSDP": "fsdp_config", "engine": "engine_config"}
    if config["distributed_strategy"] in strategy_block:
        assert strategy_block[config["distributed_strategy"]] in config


def test_every_memory_figure_of_the_api_names_its_source():
    """docs/selector.md: every number says where it came from. The host-RAM and NVMe figures had no source;
    an optimizer-offloading plan (opt-30b on 8 x 40 GiB) needs 420 GiB of host memory per node, a formula's."""
    config = get_distributed_training_config("text_generation", "opt-30b", gpu_count=8, max_memory_gb=40)
    memory = config["estimated_memory"]
    figures = [key.removesuffix("_gb") for key in memory if key.endswith("_gb")]
    renamed = {"optimizer": "optimizer_states", "per_gpu": "total"}
    missing = [name for name in figures if renamed.get(name, name) not in memory["sources"]]
    assert missing == []
    assert memory["cpu_per_node_gb"] > 100 and memory["sources"]["cpu_per_node"].startswith("formula: ZeRO-Offload")
    assert memory["sources"]["nvme_per_node"] == "none: nothing offloaded to nvme"


def test_strategy_blocks_follow_the_chosen_strategy():
    selector = HardwareSelector()
    zero = selector.get_distributed_training_config("text_generation", "gpt2-xl", 8, 8, gpu="V100-32GB", seq_len=1024)
    assert zero["distributed_strategy"] != "DDP"  # DDP does not fit (DeepSpeed ZeRO tutorial)
    if zero["distributed_strategy"] == "DeepSpeed":
        block = zero["deepspeed_config"]
        assert set(block) >= {"zero_stage", "offload_optimizer", "offload_param", "ds_config"}
        assert isinstance(block["offload_param"], bool) and isinstance(block["offload_optimizer"], bool)
        assert block["ds_config"]["zero_optimization"]["stage"] == block["zero_stage"]
    if zero["distributed_strategy"] == "FSDP":
        assert set(zero["fsdp_config"]) >= {"sharding_strategy", "cpu_offload", "activation_checkpointing"}
        assert isinstance(zero["fsdp_config"]["cpu_offload"], bool)
    small = selector.get_distributed_training_config("text_generation", "opt-125m", 4, 32, gpu="A100-40GB")
    assert small["distributed_strategy"] == "DDP" and "deepspeed_config" not in small


def test_max_memory_gb_caps_a_named_gpu():
    config = get_distributed_training_config("text_generation", "opt-1.3b", 2, 8, max_memory_gb=20, gpu="A100-80GB")
    assert config["plan"].cluster.gpu.memory_bytes == 20 * GIB
    assert config["estimated_memory"]["per_gpu_gb"] <= 20


def test_nothing_fits_returns_suggestions_instead_of_a_plan():
    config = get_distributed_training_config("text_generation", "llama-2-70b", 1, 8, gpu="T4")
    assert config["fits"] is False and config["plan"] is None and config["suggestions"]


def test_select_hardware_compares_gpus_and_ranks_by_cost():
    result = HardwareSelector().select_hardware_for_task(
        "text_generation",
        "opt-1.3b",
        task_type="training",
        batch_size=32,
        distributed=True,
        gpu_count=4,
        include_detected=False,
        candidates=["A100-80GB", "H100-80GB", "L4", "T4"],
    )
    assert result["gpu_count"] == 4
    primary = result["primary_recommendation"]
    assert primary["fits"] and result["distributed_strategy"] == primary["distributed_strategy"]
    options = [primary, *result["fallback_options"]]
    costs = [option["usd_per_million_tokens"] for option in options]
    priced = [cost for cost in costs if cost is not None]  # the GPUs the price catalog prices, cheapest first
    assert costs == sorted(priced) + [None] * (len(costs) - len(priced))
    assert set(result["estimates"]) == {"A100-80GB", "H100-80GB", "L4", "T4"}


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda s: s.get_distributed_training_config("text_generation", "no-such-model", 8, 16), "unknown model"),
        (lambda s: s.get_distributed_training_config("images", "gpt2", 8, 16), "unknown model family"),
        (lambda s: s.get_distributed_training_config("text_generation", "gpt2", 12, 16), "whole number of nodes"),
        (
            lambda s: s.get_distributed_training_config("text_classification", "t5-small", 1, 8),
            "not a 'text_classification'",
        ),
        (lambda s: s.select_hardware_for_task("text_generation", "gpt2", task_type="serving"), "task_type must be"),
    ],
)
def test_bad_api_input_raises_one_line_user_errors(call, message):
    with pytest.raises(UserInputError) as error:
        call(HardwareSelector())
    assert message in str(error.value) and "\n" not in str(error.value)


def test_importing_the_api_imports_no_heavy_library():
    probe = "import sys, hardware_selector; print(sorted(m for m in ('torch','transformers','deepspeed') if m in sys.modules))"
    completed = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert completed.stdout.strip() == "[]", completed.stderr


def test_booleans_are_booleans_and_candidates_a_list():
    """select_hardware_for_task(distributed="no") planned 4 GPUs: a string is true to Python (a new user's audit)."""
    import pytest

    from planner.selector import select_hardware_for_task

    for keyword, value, message in (
        ("distributed", "no", "distributed must be True or False"),
        ("include_detected", "yes", "include_detected must be True or False"),
        ("candidates", "A100-80GB", r"candidates must be a list of names such as \[.A100-80GB.\]"),
    ):
        with pytest.raises(ValueError, match=message):
            select_hardware_for_task("text_generation", "gpt2", **{keyword: value})


def test_serving_formats_are_one_line_naming_the_argument():
    """weights="int3" was a four-line pydantic dump (a new user's audit)."""
    import pytest

    from planner.selector import get_inference_config

    for keyword, value in (("weights", "int3"), ("kv_cache", "int2"), ("weights", None)):
        with pytest.raises(ValueError, match=f"^{keyword} must be one of ") as raised:
            get_inference_config("text_generation", "gpt2", **{keyword: value})
        assert "\n" not in str(raised.value)


def test_what_would_fit_names_keyword_arguments_not_flags():
    """An API caller cannot pass `--weights` or `--distributed --gpu-count`: a suggestion or error of
    get_inference_config and get_distributed_training_config names the keyword arguments, and a suggested
    call, made as printed, fits (docs/selector.md)."""
    import inspect
    import re

    from hardware_selector import get_inference_config

    methods = (HardwareSelector.get_inference_config, HardwareSelector.get_distributed_training_config)
    keywords = {name for method in methods for name in inspect.signature(method).parameters}
    serving = get_inference_config("text_generation", "llama-3-8b", gpu_count=1, batch_size=4, max_memory_gb=16)
    training = get_distributed_training_config("text_generation", "llama-2-70b", 1, 8, gpu="T4")
    lines = serving["suggestions"] + training["suggestions"]
    assert not any("--" in line for line in lines), lines
    named = {name for line in lines for name in re.findall(r"\b([a-z]+(?:_[a-z]+)+)\b", line)}
    assert named and named <= keywords, named - keywords
    assert "weights='int8' fits on 1 x V100-16GB" in serving["suggestions"]
    cluster = re.search(r"\(gpu_count=(\d+), gpus_per_node=(\d+)\) fits", " ".join(serving["suggestions"]))
    assert cluster is not None, serving["suggestions"]
    count, per_node = int(cluster.group(1)), int(cluster.group(2))
    assert get_inference_config("text_generation", "llama-3-8b", gpu_count=count, gpus_per_node=per_node,
                                batch_size=4, max_memory_gb=16)["fits"]  # fmt: skip
    with pytest.raises(UserInputError, match=r"shorten context \(to 7936 for the default 256 output tokens\)$"):
        get_inference_config("text_generation", "llama-3-8b", context=9000)
    with pytest.raises(UserInputError, match="shorten context or output_tokens$"):
        get_inference_config("text_generation", "llama-3-8b", context=8000, output_tokens=500)


def test_a_memory_cap_that_leaves_no_candidate_says_so():
    """select_hardware_for_task(max_memory_gb=8, candidates=["A10"]) said "no catalog GPU fits gpt2 ...; raise
    gpu_count", as if gpt2 were too big: the cap had left no GPU to plan on."""
    from planner.selector import select_hardware_for_task

    with pytest.raises(ValueError, match="^no candidate GPU has max_memory_gb 8 or less; raise max_memory_gb"):
        select_hardware_for_task("text_generation", "gpt2", max_memory_gb=8, candidates=["A10"], include_detected=False)


def test_a_request_without_batch_size_says_the_batch_the_search_chose():
    """batch_size left out gave 32 per GPU x 16 steps (1024 sequences) with no note and no word in the docs; the
    reference is plan's own default: DEFAULT_TOKENS_PER_STEP tokens a step."""
    from planner.search.batching import DEFAULT_TOKENS_PER_STEP

    config = get_distributed_training_config("text_generation", "gpt2", gpu_count=2, calibrate=False)
    assert config["requested_per_gpu_batch_size"] is None
    assert config["effective_batch_size"] * config["sequence_length"] == DEFAULT_TOKENS_PER_STEP
    micro, steps = config["per_gpu_batch_size"], config["gradient_accumulation_steps"]
    assert config["batch_note"] == (
        f"no batch_size given: the search chose {config['effective_batch_size']} sequences a step "
        f"({DEFAULT_TOKENS_PER_STEP:,} tokens, about the million tokens `plan` defaults to), {micro} per GPU x "
        f"{steps} accumulation steps; pass batch_size (sequences per GPU) to set it"
    )
    given = get_distributed_training_config("text_generation", "gpt2", gpu_count=2, batch_size=4, calibrate=False)
    assert "batch_note" not in given  # 4 per GPU fit as asked: nothing to say
