"""The Python API's answers as a long-time user's audit (2026-11-30) read them: each case failed before its fix
(docs/selector.md's conventions are the reference: batch_size is per GPU, the answer's batch fields multiply to
the effective batch, errors are one UserInputError that says what to do)."""

from __future__ import annotations

import pytest

from planner.errors import UserInputError


def test_a_tensor_parallel_answer_says_its_batch_is_per_replica():
    """An engine plan at tp 2 on 8 GPUs holds 4 replicas: 4 per GPU asked, per_gpu_batch_size 4 x 8 GPUs x 2
    accumulation read as 64 where the effective batch is 32. The note says the batch is per replica, and the
    fields multiply by replicas; a user who asked for the engine is not told nothing else fit."""
    from hardware_selector import get_distributed_training_config

    config = get_distributed_training_config("text_generation", "llama-2-7b", 8, 4, strategies=["engine"])
    plan = config["plan"]
    replicas = plan.config.data_parallel_size(8)
    assert replicas < 8  # the layout splits the model, else this case tests nothing
    assert config["per_gpu_batch_size"] * replicas * config["gradient_accumulation_steps"] == 32
    assert config["effective_batch_size"] == 32
    assert f"hold {replicas} model replicas, so per_gpu_batch_size is per replica" in config["batch_note"]
    assert "engine_reason" not in config  # asked for: not "nothing on DDP, FSDP or DeepSpeed fits"


def test_a_batch_beyond_what_a_plan_takes_is_said_in_the_callers_words():
    """16,000,000 per GPU on 8 GPUs raised pydantic's ValidationError naming `global_batch`."""
    from hardware_selector import get_distributed_training_config

    with pytest.raises(UserInputError, match=r"^batch_size 16,000,000 per GPU x 8 GPUs is 128,000,000 sequences"):
        get_distributed_training_config("text_generation", "gpt2", 8, 16_000_000)


def test_the_same_refusal_on_every_gpu_is_said_not_raise_gpu_count():
    """A 4,096-token prompt on gpt2 (1,024 positions) was "no catalog GPU fits gpt2 at 1 GPUs; raise gpu_count",
    which no count helps: the reason every GPU gave is the answer."""
    from hardware_selector import HardwareSelector

    with pytest.raises(UserInputError) as caught:
        HardwareSelector().select_hardware_for_task(
            "text_generation", "gpt2", task_type="inference", seq_len=4096, gpu_count=1
        )
    assert str(caught.value).startswith("no catalog GPU fits gpt2: a 4096-token prompt leaves no room to generate")
    assert "raise gpu_count" not in str(caught.value)


def test_cost_ranking_without_prices_ranks_by_speed_and_says_so():
    """With no catalog price among the GPUs that fit, the cost sort left them in catalog order (V100 first,
    RTX-4090 unlisted) under "USD per million tokens"."""
    from hardware_selector import HardwareSelector

    answer = HardwareSelector().select_hardware_for_task("text_generation", "gpt2", gpu_count=2, max_memory_gb=24)
    ranked = [answer["primary_recommendation"], *answer["fallback_options"]]
    if all(option["usd_per_million_tokens"] is None for option in ranked):
        speeds = [option["estimated_throughput"]["tokens_per_s"] for option in ranked]
        assert speeds == sorted(speeds, reverse=True)
        assert answer["ranked_by"] == "tokens/s (no GPU here has a catalog price to rank by cost)"
    else:  # priced ones first, cheapest first
        costs = [option["usd_per_million_tokens"] for option in ranked if option["usd_per_million_tokens"] is not None]
        assert costs == sorted(costs) and answer["ranked_by"].startswith("USD per million tokens")


def test_emit_run_folder_takes_what_the_readme_says_and_refuses_the_rest(tmp_path):
    """README: "a Plan, a plan.json or a run folder". A plan.json, a folder or a Path raised AttributeError, a
    no-fit answer's None too, and force="no" overwrote the folder."""
    import json

    import hardware_selector as hs
    from hardware_selector import get_distributed_training_config

    plan = get_distributed_training_config("text_generation", "gpt2", 2, 4)["plan"]
    hs.emit_run_folder(plan, tmp_path / "a")
    hs.emit_run_folder(tmp_path / "a" / "plan.json", tmp_path / "b")
    hs.emit_run_folder(str(tmp_path / "a"), tmp_path / "c")
    documents = [json.loads((tmp_path / name / "plan.json").read_text()) for name in "abc"]
    assert documents[0]["config"] == documents[1]["config"] == documents[2]["config"]
    with pytest.raises(UserInputError, match=r"not NoneType \(an answer where nothing fit has no plan"):
        hs.emit_run_folder(None, tmp_path / "d")
    with pytest.raises(UserInputError, match="force must be True or False, not str 'no'"):
        hs.emit_run_folder(plan, tmp_path / "a", force="no")


def test_a_training_comparison_prices_the_cluster_it_planned_and_says_where_from():
    """A training answer of select_hardware_for_task gave usd_per_million_tokens without its price or source (the
    inference answers have both), at the single GPU's catalog price on 16 GPUs, which rent as whole servers; and a
    count that is no whole number of nodes advised gpus_per_node, which this method refuses."""
    from hardware_selector import HardwareSelector
    from planner.hardware.cluster import make_cluster

    selector = HardwareSelector()
    answer = selector.select_hardware_for_task("text_generation", "llama-2-7b", gpu_count=16, candidates=["H100-80GB"])
    primary = answer["primary_recommendation"]
    cluster = make_cluster("H100-80GB", gpus_per_node=8, nodes=2)
    assert primary["usd_per_gpu_hour"] == cluster.gpu.price_usd_per_hour
    assert primary["price_source"] == cluster.gpu.price_note()
    tokens_per_s = primary["estimated_throughput"]["tokens_per_s"]
    assert primary["usd_per_million_tokens"] == pytest.approx(
        primary["usd_per_gpu_hour"] * 16 / 3600 / tokens_per_s * 1e6
    )
    with pytest.raises(UserInputError) as caught:
        selector.select_hardware_for_task("text_generation", "llama-2-7b", gpu_count=12)
    assert "gpus_per_node" not in str(caught.value) and "give a multiple of 8" in str(caught.value)


def test_a_gpu_count_without_distributed_is_refused_not_dropped():
    """distributed=False with gpu_count=8 compared one GPU without a word (its default of 4 could not tell a count
    given from none): the count is now refused in one line; left out, it is 4 distributed and 1 otherwise."""
    from hardware_selector import HardwareSelector

    selector, only = HardwareSelector(), dict(candidates=["A100-80GB"], include_detected=False, calibrate=False)
    with pytest.raises(UserInputError, match=r"gpu_count=8 needs distributed=True \(distributed=False compares one"):
        selector.select_hardware_for_task("text_generation", "gpt2", distributed=False, gpu_count=8, **only)
    assert selector.select_hardware_for_task("text_generation", "gpt2", distributed=False, **only)["gpu_count"] == 1
    assert selector.select_hardware_for_task("text_generation", "gpt2", **only)["gpu_count"] == 4


def test_the_selectors_training_arguments_sets_up_a_cpu_plan_as_the_function_does(tmp_path, monkeypatch):
    """HardwareSelector.training_arguments skipped the CPU set-up hardware_selector.training_arguments does for a
    CPU plan's FSDP or DeepSpeed (accelerate's state on gloo): both run the one installed set-up now. Outside a
    launch (no WORLD_SIZE, as here) the set-up is skipped: the function raised torch's "Default process group
    has not been initialized" there."""
    import hardware_selector
    from backends.cpu_distributed import configure_launched_cpu_state
    from hardware_selector_cli.app import main
    from planner.rundir import training_arguments as module
    from planner.rundir.plan_file import plan_and_run

    selector = hardware_selector.HardwareSelector()
    assert module._cpu_state_setup == [configure_launched_cpu_state]  # installed by the API's door
    args = ["plan", "--model", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "64",
            "--global-batch", "4", "--strategies", "fsdp", "--no-calibration", "--emit", str(tmp_path / "run")]  # fmt: skip
    assert main(args) == 0
    plan, _ = plan_and_run(tmp_path / "run")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert hardware_selector.training_arguments(plan, tmp_path / "out").fsdp  # built, not torch's ValueError
    from accelerate import PartialState
    from accelerate.state import AcceleratorState

    called: list[str] = []

    def launched(strategy: str) -> bool:  # as under torchrun, without its process group: one process's state
        called.append(strategy)
        PartialState(cpu=True)
        return True

    def configured_nothing(strategy: str) -> bool:  # says it set the state up, and did not
        called.append(strategy)
        return True

    try:
        # transformers refuses use_configured_state without a state: the set-up's answer reaches it.
        AcceleratorState._reset_state(reset_partial_state=True)  # the call above left one
        monkeypatch.setattr(module, "_cpu_state_setup", [configured_nothing])
        with pytest.raises(UserInputError, match="use_configured_state"):
            selector.training_arguments(plan, str(tmp_path / "out"))
        monkeypatch.setattr(module, "_cpu_state_setup", [launched])
        assert selector.training_arguments(plan, str(tmp_path / "out")).fsdp
        assert called == ["fsdp"] * 2
        hardware_selector.training_arguments(tmp_path / "run", tmp_path / "out")  # installs its own again
        assert module._cpu_state_setup == [configure_launched_cpu_state]
    finally:  # accelerate's state is the process's: the next test starts without it
        AcceleratorState._reset_state(reset_partial_state=True)
