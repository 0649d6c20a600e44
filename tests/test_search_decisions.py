"""The strategy search against decisions the published record supports, and its explanations."""

from __future__ import annotations

from functools import cache

import pytest

from planner.hardware.cluster import make_cluster
from planner.models.resolve import resolve_model
from planner.search import PlanRequest, search_plans
from planner.search.strategy_layout import family_label
from planner.training_config import Offload, Strategy


@cache
def _search(model: str, gpu: str, gpus_per_node: int, nodes: int = 1, cpu_ram_gb: float | None = None, **request):
    cluster = make_cluster(gpu, gpus_per_node=gpus_per_node, nodes=nodes, cpu_ram_gb=cpu_ram_gb)
    return search_plans(resolve_model(model), cluster, PlanRequest(**request))


def test_gpt2_1_5b_on_8_v100_32gb_ddp_does_not_fit_and_zero1_does():
    # DeepSpeed ZeRO tutorial: the 1.5B GPT-2 runs out of memory under plain data
    # parallelism on 32 GB V100s at micro-batch 1; ZeRO stage 1 fits it.
    result = _search("gpt2-xl", "V100-32GB", 8, micro_batch=1, seq_len=1024)
    assert "per GPU >" in result.rejected["DDP"]
    zero1 = [plan for plan in result.candidates if family_label(plan.config) == "ZeRO-1"]
    assert (zero1 and zero1[0].memory.fits) or result.rejected["ZeRO-1"].startswith("fits")
    assert result.best is not None and result.best.config.strategy is not Strategy.DDP


def test_13b_on_one_v100_32gb_fits_only_with_optimizer_offload():
    # ZeRO-Offload (Ren et al. 2021): a 13B model trains on a single 32 GB V100
    # (DGX-2 host, 1.5 TB of CPU memory) only with the optimizer offloaded to the CPU.
    result = _search("opt-13b", "V100-32GB", 1, cpu_ram_gb=1500, micro_batch=1, seq_len=1024)
    best = result.best
    assert best is not None and best.config.offload_optimizer is Offload.CPU
    for family, fate in result.rejected.items():
        if "offload" not in family:
            assert "per GPU >" in fate, (family, fate)
    assert all("offload" in family_label(plan.config) for plan in result.candidates)


def test_125m_model_on_4_gpus_chooses_ddp():
    result = _search("opt-125m", "A100-40GB", 4, seq_len=2048)
    assert result.best is not None and result.best.config.strategy is Strategy.DDP


def test_global_batch_is_micro_times_accum_times_dp_for_every_plan():
    result = _search("llama-2-7b", "H100-80GB", 8, nodes=4, global_batch=1024, seq_len=4096)
    assert result.candidates
    for plan in result.candidates:
        assert plan.global_batch == 1024
        assert plan.throughput.global_batch == 1024
        assert plan.memory.fits and plan.memory.total <= plan.memory.usable_bytes
        assert plan.layout.world_size == 32


def test_every_reason_and_fate_is_one_line_and_numbers_name_a_source():
    result = _search("llama-2-7b", "H100-80GB", 8, nodes=4, global_batch=1024, seq_len=4096)
    for plan in result.candidates:
        assert plan.reasons and all("\n" not in reason for reason in plan.reasons)
        assert "[memory: formula" in plan.reasons[0]
        assert "[throughput: " in plan.reasons[1]
    for family, fate in result.rejected.items():
        assert "\n" not in fate and fate, family
        assert "[memory: " in fate or "[throughput: " in fate or "within" in fate, fate


def test_nothing_fits_says_how_many_gpus_and_which_gpu_would():
    result = _search("llama-2-70b", "A10", 1, seq_len=2048)  # 70B on one 24 GiB card
    assert result.best is None and not result.candidates
    assert any("is the fewest that fits" in line for line in result.suggestions), result.suggestions
    assert all("\n" not in line for line in result.suggestions)


def test_nothing_fits_names_a_catalog_gpu_that_fits_at_this_count():
    result = _search("llama-2-70b", "T4", 8, seq_len=2048)  # 8 x 16 GiB, 512 GiB host RAM
    assert result.best is None
    named = [line for line in result.suggestions if "these catalog GPUs fit" in line]
    assert named and "A100-80GB" in named[0], result.suggestions


def test_global_batch_that_no_layout_divides_is_explained():
    result = _search("opt-125m", "A100-40GB", 4, global_batch=6, seq_len=512)
    assert "not a multiple of its data-parallel size 4" in result.rejected["DDP"]


def test_throughput_adjust_hook_reranks_and_the_plan_says_it_was_calibrated():
    # What the benchmark DB does with measured records: correct each candidate's estimate.
    def halve_ddp(config, estimate):
        if config.strategy is not Strategy.DDP:
            return estimate
        return estimate.model_copy(
            update={"tokens_per_s": estimate.tokens_per_s / 2, "step_time_s": estimate.step_time_s * 2}
        )

    cluster = make_cluster("A100-40GB", gpus_per_node=4)
    result = search_plans(
        resolve_model("opt-125m"), cluster, PlanRequest(seq_len=2048), halve_ddp, calibration="test: DDP halved"
    )
    assert result.best is not None and result.best.config.strategy is not Strategy.DDP
    assert result.best.calibration == "test: DDP halved"
    assert "slower" in result.rejected["DDP"]


def test_qlora_fits_a_65b_class_model_on_one_48gb_gpu_and_16bit_lora_does_not():
    # QLoRA (Dettmers et al. 2023): a 65B model fine-tunes on a single 48 GB GPU with
    # a 4-bit NF4 base; a 16-bit base alone (2 bytes per weight) is about three times that.
    qlora = _search("llama-2-70b", "A6000", 1, qlora=True, lora_rank=16, micro_batch=1, seq_len=512)
    assert qlora.best is not None and qlora.best.config.qlora
    lora16 = _search("llama-2-70b", "A6000", 1, lora_rank=16, micro_batch=1, seq_len=512, allow_offload=False)
    assert lora16.best is None


def test_a_pinned_fsdp_sharding_is_what_the_plan_and_its_run_folder_use(tmp_path):
    """`--strategies fsdp-full` (a tutorial's FULL_SHARD for a small model, which ranks below NO_SHARD and
    grad-op by speed) holds through the search and --emit; `fsdp` alone still picks what ranks best."""
    import yaml

    from planner.rundir.write import emit_run_folder
    from planner.training_config import FsdpSharding

    spec, cluster = resolve_model("gpt2"), make_cluster("A100-80GB", gpus_per_node=2)
    free = search_plans(spec, cluster, PlanRequest(strategies=("fsdp",), global_batch=32, seq_len=1024)).best
    assert free.config.fsdp_sharding is not FsdpSharding.FULL
    for name, sharding in (("fsdp-full", FsdpSharding.FULL), ("fsdp-grad-op", FsdpSharding.GRAD_OP)):
        result = search_plans(spec, cluster, PlanRequest(strategies=(name,), global_batch=32, seq_len=1024))
        assert {plan.config.fsdp_sharding for plan in result.candidates} == {sharding}, name
    pinned = search_plans(spec, cluster, PlanRequest(strategies=("fsdp-full",), global_batch=32, seq_len=1024)).best
    emit_run_folder(pinned, tmp_path / "run")
    accelerate = yaml.safe_load((tmp_path / "run" / "accelerate_config.yaml").read_text())
    assert accelerate["fsdp_config"]["fsdp_reshard_after_forward"] is True  # FSDP2's FULL_SHARD


def test_nvme_given_with_nvme_gb_makes_zero_infinity_the_answer_where_nothing_else_fits():
    """llama-2-70b on one A100-80GB with 64 GiB of host RAM: nothing fits, until `--nvme-gb` says the node has
    NVMe to offload to; then ZeRO-Infinity is the plan (the seed's "extreme memory" example)."""
    import json

    from tests.distributed import cli_in_process

    base = ["plan", "-m", "llama-2-70b", "--gpu", "A100-80GB", "--gpus-per-node", "1", "--cpu-ram-gb", "64", "--json"]
    assert json.loads(cli_in_process(*base).stdout)["best"] is None
    best = json.loads(cli_in_process(*base, "--nvme-gb", "4000").stdout)["best"]
    assert best["config"]["offload_optimizer"] == "nvme" and best["config"]["offload_params"] == "nvme"


def test_zero_infinity_needs_the_nvme_it_fills_and_its_speed_is_the_nodes():
    """--nvme-gb is a capacity, checked like host RAM: 10 GiB cannot hold the 1 TiB llama-2-70b offloads, and the
    rejection says so. The offload time reads the node's NVMe at --nvme-gbps (default: the assumed figure, named
    in the plan's sources): at an unbounded bandwidth ZeRO-Infinity costs what ZeRO-3 with everything offloaded
    to CPU costs (same PCIe traffic and CPU Adam), and a slower drive costs more."""
    from planner.evaluate import evaluate
    from planner.hardware.cluster import DEFAULT_NVME_GBPS_PER_NODE

    spec = resolve_model("llama-2-70b")

    def cluster(**nvme):
        return make_cluster("A100-80GB", gpus_per_node=1, cpu_ram_gb=64, **nvme)

    small = search_plans(spec, cluster(nvme_gb=10), PlanRequest(seq_len=2048))
    assert small.best is None
    assert "GiB NVMe per node for offload > 10.0 GiB" in small.rejected["ZeRO-Infinity (NVMe offload)"]

    best = search_plans(spec, cluster(nvme_gb=4000), PlanRequest(seq_len=2048)).best
    assert best.memory.nvme_per_node_bytes <= best.memory.nvme_capacity_per_node_bytes == 4000 * 2**30
    assert "an assumed default" in best.throughput.sources["offload_s"]
    assert any(reason.startswith("ZeRO-Infinity: ") and "assumed default" in reason for reason in best.reasons)

    def offload_s(config, **nvme) -> float:
        return evaluate(spec, config, cluster(nvme_gb=4000, **nvme)).throughput.breakdown.offload_s

    config = best.config
    on_cpu = config.model_copy(update={"offload_optimizer": Offload.CPU, "offload_params": Offload.CPU})
    assert offload_s(config, nvme_gbps=1e6) == pytest.approx(offload_s(on_cpu), rel=1e-3)
    assert offload_s(config, nvme_gbps=3) > offload_s(config) > offload_s(config, nvme_gbps=25) > offload_s(on_cpu)
    assert offload_s(config, nvme_gbps=DEFAULT_NVME_GBPS_PER_NODE) == offload_s(config)  # that figure, nothing else
    user = evaluate(spec, config, cluster(nvme_gb=4000, nvme_gbps=25)).throughput.sources["offload_s"]
    assert "NVMe 25 GB/s per node (user, --nvme-gbps)" in user


def test_cpu_processes_are_planned_fsdp2_only():
    """The emitted FSDP1 configs (no-shard, hybrid) do not run on CPU processes (transformers' sync_module_states
    needs an accelerator; FSDP1's full state dict crashed there): the search offers the cpu device FSDP2 only,
    and a GPU all four."""
    from planner.hardware.cluster import make_cluster
    from planner.search.layouts import _fsdp_layouts
    from planner.training_config import FsdpSharding

    fsdp1 = {sharding for sharding in FsdpSharding if not sharding.fsdp2}

    def shardings(cluster):
        return {layout.fields["fsdp_sharding"] for layout in _fsdp_layouts(cluster, False, with_ddp=False)}

    cpu = shardings(make_cluster("cpu", gpus_per_node=2, nodes=2))
    gpu = shardings(make_cluster("H100-80GB", gpus_per_node=8, nodes=2))
    assert cpu and fsdp1 == {FsdpSharding.HYBRID, FsdpSharding.NONE} and not cpu & fsdp1
    assert fsdp1 <= gpu


@pytest.mark.parametrize("strategies", [("fsdp-no-shard",), ("fsdp-hybrid", "fsdp-no-shard")])
def test_fsdp1_alone_on_cpu_processes_is_one_line_saying_why_not_nothing_fits(strategies):
    """Found by a review: asked for FSDP1's shardings alone on the cpu device, the search said nothing fits on any
    count of it and suggested LoRA, where no layout was ever tried."""
    from planner.errors import UserInputError

    cpu = make_cluster("cpu", gpus_per_node=2, nodes=2)
    with pytest.raises(UserInputError) as refused:
        search_plans(resolve_model("gpt2"), cpu, PlanRequest(seq_len=32, global_batch=4, strategies=strategies))
    assert "leaves nothing to search" in str(refused.value) and "do not run on CPU processes" in str(refused.value)
    beside_ddp = search_plans(
        resolve_model("gpt2"), cpu, PlanRequest(seq_len=32, global_batch=4, strategies=("ddp", "fsdp-no-shard"))
    )
    assert beside_ddp.best is not None and beside_ddp.best.config.strategy is Strategy.DDP
    assert "do not run on CPU processes" in beside_ddp.rejected["FSDP no-shard"]
