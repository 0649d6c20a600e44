"""DeepSpeed's ZeRO++ as the planner plans it (planner/throughput/zeropp.py, docs/search.md "ZeRO++").

References: the ZeRO++ blog's statement of the cross-node traffic a step (3M for ZeRO-3, 0.75M with qwZ, hpZ and
qgZ: the forward gather M -> 0.5M, the backward gather M -> 0, the gradients M -> 0.25M), DeepSpeed's own config
model for the keys we emit, and the memory hpZ's secondary partition adds (the 16-bit parameters over a node).
"""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main
from planner.hardware.cluster import make_cluster
from planner.models.flops import model_shape
from planner.models.resolve import resolve_model
from planner.throughput.collectives import all_gather_s, cluster_links, process_group
from planner.throughput.communication import communication_plan
from planner.throughput.constants import CONSTANTS
from planner.training_config import TrainingConfig

NODES, GPUS_PER_NODE = 8, 16

PARAMS = float(resolve_model("opt-13b").params.total)  # what every rank gathers: ZeRO-3 without TP


def _plans(interconnect: str):
    spec = resolve_model("opt-13b")
    cluster = make_cluster("V100-32GB", GPUS_PER_NODE, NODES, interconnect=interconnect)
    links = cluster_links(cluster, CONSTANTS.link_efficiency)
    plans = {}
    for zeropp in (False, True):
        config = TrainingConfig(strategy="deepspeed", zero_stage=3, zeropp=zeropp, precision="fp16-mixed")
        plans[zeropp] = communication_plan(
            model_shape(spec),
            config,
            links,
            world_size=NODES * GPUS_PER_NODE,
            pcie_Bps=16e9,
            memory_Bps=900e9,
            k=CONSTANTS,
            nvme_Bps=0.0,
        )
    return plans, links


def test_cross_node_traffic_is_the_blogs_quarter_of_zero3s():
    """On a network slow enough that the node's NICs pace every collective, the seconds are the bytes: ZeRO-3 sends
    3M across nodes a micro-batch (two gathers, one reduce-scatter), ZeRO++ 0.75M (0.5M + 0 + 0.25M)."""
    plans, links = _plans("ethernet-25g")
    zero3, zeropp = plans[False], plans[True]
    assert zero3.gather_backward is None  # ZeRO-3: the backward gathers what the forward does
    assert zeropp.gather / zero3.gather == pytest.approx(0.5, rel=0.01)  # qwZ: int8 against fp16
    assert zeropp.reduce / zero3.reduce == pytest.approx(0.25, rel=0.01)  # qgZ: int4 against fp16
    assert zeropp.gather_backward is not None and zeropp.gather_backward < 0.05 * zero3.gather  # hpZ: NVLink only
    # DeepSpeed quantizes hpZ's in-node gather too (partition_parameters.py, _all_gather_coalesced): int8 over NVLink
    assert zeropp.gather_backward == pytest.approx(
        all_gather_s(links, process_group(GPUS_PER_NODE, 1, GPUS_PER_NODE), PARAMS * 1.0), rel=1e-9
    )
    cross_node = (zeropp.gather + zeropp.reduce) / (2 * zero3.gather + zero3.reduce)
    assert cross_node == pytest.approx(0.75 / 3, rel=0.02)


def test_the_backward_gather_stays_inside_the_node():
    """hpZ's gather is ZeRO-3's all-gather over the node's 16 GPUs alone: the same whatever the network."""
    slow, _ = _plans("ethernet-25g")
    fast, links = _plans("ib-ndr")
    assert slow[True].gather_backward == pytest.approx(fast[True].gather_backward, rel=1e-9)
    assert slow[True].gather > fast[True].gather  # the forward gather still crosses nodes


def test_hpz_secondary_partition_is_charged_in_memory():
    from planner.memory.estimate import estimate_memory_bytes

    spec = resolve_model("opt-13b")
    per_gpu = {}
    for zeropp in (False, True):
        config = TrainingConfig(strategy="deepspeed", zero_stage=3, zeropp=zeropp, precision="fp16-mixed")
        result = estimate_memory_bytes(spec, config, world_size=NODES * GPUS_PER_NODE, gpus_per_node=GPUS_PER_NODE)
        per_gpu[zeropp] = result["buffers"]
    secondary = spec.params.total * 2 / GPUS_PER_NODE  # the 16-bit parameters over one node's GPUs
    assert per_gpu[True] - per_gpu[False] == pytest.approx(secondary, rel=1e-6)


@pytest.mark.parametrize(
    "fields, needle",
    [
        ({"strategy": "deepspeed", "zero_stage": 2, "zeropp": True}, "built on ZeRO-3"),
        ({"strategy": "fsdp", "zeropp": True}, "built on ZeRO-3"),
        (
            {
                "strategy": "deepspeed",
                "zero_stage": 3,
                "zeropp": True,
                "offload_params": "cpu",
                "precision": "fp16-mixed",
            },
            "drop one",
        ),
        ({"strategy": "deepspeed", "zero_stage": 3, "zeropp": True, "precision": "bf16-mixed"}, "reads fp16"),
    ],
)
def test_zeropp_outside_zero3_is_refused(fields, needle):
    with pytest.raises(ValueError, match=needle):  # UserInputError, which pydantic wraps
        TrainingConfig(**fields)


def test_plan_json_without_zeropp_is_unchanged_and_with_it_round_trips():
    plain = TrainingConfig(strategy="deepspeed", zero_stage=3)
    assert "zeropp" not in plain.model_dump(mode="json")
    zeropp = TrainingConfig(strategy="deepspeed", zero_stage=3, zeropp=True, precision="fp16-mixed")
    assert TrainingConfig.model_validate(zeropp.model_dump(mode="json")).zeropp


def test_estimate_flag_and_its_refusal(capsys):
    base = ["estimate", "-m", "opt-13b", "--gpu", "V100-32GB", "--gpus-per-node", "16", "--nodes", "8"]
    base += ["--interconnect", "ethernet-100g", "--precision", "fp16-mixed", "--ac", "full", "--micro-batch", "4"]
    assert main([*base, "--strategy", "zero3", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*base, "--strategy", "zero3", "--zeropp", "--json"]) == 0
    zeropp = json.loads(capsys.readouterr().out)
    assert zeropp["throughput"]["tokens_per_s"] > plain["throughput"]["tokens_per_s"]
    assert "ZeRO++" in zeropp["throughput"]["sources"]["zeropp"] and "zeropp" not in plain["throughput"]["sources"]
    assert main([*base, "--strategy", "zero2", "--zeropp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--zeropp is DeepSpeed's ZeRO++, built on ZeRO-3" in err


def test_plan_offers_zeropp_only_when_asked_and_emits_what_deepspeed_reads(capsys, tmp_path):
    base = ["plan", "-m", "gpt2", "--gpu", "A100-80GB", "--gpus-per-node", "8", "--nodes", "2"]
    base += ["--interconnect", "ethernet-25g", "--strategies", "zero3", "--json"]
    assert main(base) == 0
    assert "ZeRO++" not in {row["strategy"] for row in json.loads(capsys.readouterr().out)["candidates"]}
    assert main([*base, "--zeropp"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {"ZeRO++", "ZeRO-3"} <= {row["strategy"] for row in document["candidates"]}
    assert document["best"]["strategy"] == "ZeRO++"  # a 25 Gb/s network paces ZeRO-3
    run = tmp_path / "run"
    assert main([*base[:-1], "--zeropp", "--emit", str(run)]) == 0
    capsys.readouterr()
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig  # its import logs to stdout: after the JSON

    zero = json.loads((run / "ds_config.json").read_text())["zero_optimization"]
    parsed = DeepSpeedZeroConfig(**zero)
    assert (parsed.stage, parsed.zero_quantized_weights, parsed.zero_quantized_gradients) == (3, True, True)
    assert parsed.zero_hpz_partition_size == 8  # the node's GPUs
    assert json.loads((run / "plan.json").read_text())["config"]["zeropp"] is True
    readme = (run / "README.md").read_text()
    assert readme.startswith("# Run folder: gpt2 with DeepSpeed ZeRO++ (on ZeRO-3)") and "cannot rehearse it" in readme
    for smoke in (["--tiny"], []):  # without --tiny on a machine without CUDA: the same reason, not "pass --tiny"
        assert main(["train", str(run), *smoke]) == 2  # its quantizer kernels are CUDA ops: refused before torchrun
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "CPU processes cannot rehearse it" in err
    assert main([*base[:-3], "--strategies", "ddp,fsdp", "--zeropp"]) == 2
    assert "add zero3 (or deepspeed) to --strategies" in capsys.readouterr().err


def test_inside_one_node_there_is_no_hpz():
    """Where the data-parallel ranks fit in one node hpZ has nothing to keep off the network: no secondary
    partition (DeepSpeed's default, hpz 1), no memory for it, and qwZ's int8 gathers in backward too."""
    from planner.memory.estimate import estimate_memory_bytes
    from planner.throughput.zeropp import hpz_size

    assert hpz_size(8, 8) == 1 and hpz_size(16, 8) == 8
    spec = resolve_model("opt-13b")
    cluster = make_cluster("A100-80GB", 8, 1)
    links = cluster_links(cluster, CONSTANTS.link_efficiency)
    config = TrainingConfig(strategy="deepspeed", zero_stage=3, zeropp=True, precision="fp16-mixed")
    plan = communication_plan(
        model_shape(spec), config, links, world_size=8, pcie_Bps=16e9, memory_Bps=2e12, k=CONSTANTS, nvme_Bps=0.0
    )
    assert plan.gather_backward == pytest.approx(plan.gather, rel=1e-12)
    # qgZ runs only across nodes (stage3.py: num_nodes > 1): on one node the gradients go as ZeRO-3's do
    zero3 = communication_plan(
        model_shape(spec),
        config.model_copy(update={"zeropp": False}),
        links,
        world_size=8,
        pcie_Bps=16e9,
        memory_Bps=2e12,
        k=CONSTANTS,
        nvme_Bps=0.0,
    )
    assert plan.reduce == pytest.approx(zero3.reduce, rel=1e-12) and plan.gather < zero3.gather
    buffers = {
        zeropp: estimate_memory_bytes(
            spec, config.model_copy(update={"zeropp": zeropp}), world_size=8, gpus_per_node=8
        )["buffers"]
        for zeropp in (False, True)
    }
    assert buffers[True] == buffers[False]


def test_the_ranks_refuse_zeropp_on_cpu_too():
    """launch.sh starts the ranks without the CLI: the DeepSpeed adapter refuses on CPU ranks with the same line
    (backends/adapters/deepspeed_adapter.py calls this before deepspeed.init_distributed)."""
    import inspect

    from backends.adapters import deepspeed_adapter
    from backends.adapters.deepspeed_cuda_only import refuse_cuda_only_keys_on_cpu

    refuse_cuda_only_keys_on_cpu(None)
    refuse_cuda_only_keys_on_cpu({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}})  # hpZ alone runs
    with pytest.raises(ValueError, match="zero_quantized_gradients in ds_config.json"):
        refuse_cuda_only_keys_on_cpu({"zero_optimization": {"stage": 3, "zero_quantized_gradients": True}})
    assert "refuse_cuda_only_keys_on_cpu(setup.ds_config)" in inspect.getsource(deepspeed_adapter.DeepSpeedAdapter)
