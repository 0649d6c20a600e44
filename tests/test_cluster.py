"""ClusterSpec: defaults from the catalog and presets, user overrides, and clear errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from planner.errors import UserInputError
from planner.hardware.cluster import ClusterSpec, make_cluster
from planner.hardware.gpus import load_gpu_catalog, resolve_gpu
from planner.hardware.networks import INTER_NODE_PRESETS, inter_node_preset

GIB = 2**30


def test_single_a100_node_defaults():
    cluster = make_cluster("A100-80GB")
    assert cluster.gpus_per_node == 8 and cluster.num_nodes == 1 and cluster.world_size == 8
    assert not cluster.is_multi_node
    assert cluster.inter_node_preset == "none" and cluster.inter_node_bandwidth_GBps == 0
    assert cluster.intra_node_bandwidth_GBps == 300  # NVLink 3: 600 GB/s bidirectional
    assert cluster.intra_node_latency_us == 3.0
    assert cluster.cpu_ram_per_node_bytes == 1024 * GIB  # 1 TiB for an 8-GPU SXM node
    assert cluster.cpu_ram_per_gpu_bytes == 128 * GIB
    assert cluster.nvme_per_node_bytes is None
    assert cluster.total_gpu_memory_bytes == 8 * 80 * GIB
    assert cluster.price_usd_per_hour == pytest.approx(8 * cluster.gpu.price_usd_per_hour)
    assert any("price" in note for note in cluster.assumptions)


def test_multi_node_uses_the_gpus_typical_network():
    a100 = make_cluster("A100-80GB", nodes=4)
    assert a100.inter_node_preset == "ib-hdr"
    assert a100.inter_node_bandwidth_GBps == 25  # 200 Gb/s per GPU
    assert a100.inter_node_latency_us == INTER_NODE_PRESETS["ib-hdr"].latency_us
    assert a100.world_size == 32
    h100 = make_cluster("H100-80GB", nodes=2)
    assert h100.inter_node_preset == "ib-ndr" and h100.inter_node_bandwidth_GBps == 50  # 400 Gb/s
    assert h100.intra_node_bandwidth_GBps == 450  # NVLink 4: 900 GB/s bidirectional


@pytest.mark.parametrize(
    "preset, gpus_per_node, GBps_per_gpu",
    [
        ("ib-ndr", 8, 50.0),
        ("ib-hdr", 8, 25.0),
        ("ib-hdr", 4, 25.0),  # one HCA per GPU, however many GPUs
        ("roce-1600g", 8, 25.0),  # MosaicML: 1600 Gb/s per node of 8 = 200 Gb/s per GPU
        ("roce-1600g", 4, 50.0),
        ("roce-3200g", 8, 50.0),
        ("efa", 8, 6.25),  # p4d: 400 Gb/s per node
        ("efa-p5", 8, 50.0),
        ("ethernet-100g", 8, 1.5625),
        ("ethernet-25g", 1, 3.125),
    ],
)
def test_presets_convert_gigabits_to_gigabytes_per_gpu(preset, gpus_per_node, GBps_per_gpu):
    cluster = make_cluster("A100-80GB", gpus_per_node=gpus_per_node, nodes=2, interconnect=preset)
    assert cluster.inter_node_preset == preset
    assert cluster.inter_node_bandwidth_GBps == pytest.approx(GBps_per_gpu)


def test_network_latency_grows_from_infiniband_to_ethernet():
    latency = {name: preset.latency_us for name, preset in INTER_NODE_PRESETS.items()}
    assert (
        latency["ib-ndr"]
        <= latency["roce-1600g"]
        < latency["efa"]
        < latency["ethernet-100g"]
        <= latency["ethernet-25g"]
    )


def test_every_catalog_entry_names_a_known_preset():
    for spec in load_gpu_catalog():
        assert spec.typical_inter_node in INTER_NODE_PRESETS, spec.name
        assert spec.typical_inter_node != "none", spec.name


def test_preset_names_are_case_insensitive():
    assert inter_node_preset("IB-NDR").name == "ib-ndr"


def test_user_overrides_win():
    cluster = make_cluster(
        "H100-80GB",
        gpus_per_node=4,
        nodes=2,
        interconnect="roce-3200g",
        intra_bw=200,
        inter_bw=12.5,
        cpu_ram_gb=512,
        nvme_gb=3500,
        price_per_hour=2.5,
    )
    assert cluster.gpus_per_node == 4 and cluster.num_nodes == 2
    assert cluster.intra_node_bandwidth_GBps == 200
    assert cluster.inter_node_bandwidth_GBps == 12.5
    assert cluster.inter_node_preset == "roce-3200g"
    assert cluster.cpu_ram_per_node_bytes == 512 * GIB
    assert cluster.nvme_per_node_bytes == 3500 * GIB
    assert cluster.gpu.price_usd_per_hour == 2.5
    assert cluster.price_usd_per_hour == pytest.approx(8 * 2.5)
    assert not any("catalog assumption" in note for note in cluster.assumptions)


def test_the_nvme_bandwidth_says_whose_it_is():
    """A node's NVMe bandwidth is the user's (--nvme-gbps) or the stated default, labelled an assumption; either
    way the cluster's assumptions carry it beside the NVMe's size."""
    from planner.hardware.cluster import DEFAULT_NVME_GBPS_PER_NODE

    given = make_cluster("A100-80GB", nvme_gb=3500, nvme_gbps=25)
    assert given.nvme_bandwidth() == (25, "NVMe 25 GB/s per node (user, --nvme-gbps)")
    assumed = make_cluster("A100-80GB", nvme_gb=3500)
    speed, source = assumed.nvme_bandwidth()
    assert speed == DEFAULT_NVME_GBPS_PER_NODE and "an assumed default" in source and "not measured" in source
    assert any(note.startswith("NVMe: 3500 GiB per node (user); NVMe 25 GB/s") for note in given.assumptions)
    assert any("3500 GiB per node (user)" in note and "assumed default" in note for note in assumed.assumptions)
    assert not any("NVMe" in note for note in make_cluster("A100-80GB").assumptions)


def test_interconnect_on_a_single_node_is_kept_for_information():
    cluster = make_cluster("A100-80GB", interconnect="ib-hdr")
    assert cluster.inter_node_preset == "ib-hdr" and cluster.num_nodes == 1


def test_a_gpu_spec_can_be_passed_directly():
    spec = resolve_gpu("L40S").with_price(1.0)
    cluster = make_cluster(spec, gpus_per_node=4)
    assert cluster.gpu is spec or cluster.gpu == spec
    assert cluster.intra_node_bandwidth_GBps == 32  # PCIe Gen4 x16


def test_bridged_pairs_fall_back_to_pcie_beyond_two_gpus():
    assert make_cluster("H100-NVL", gpus_per_node=2).intra_node_bandwidth_GBps == 300
    eight = make_cluster("H100-NVL", gpus_per_node=8)
    assert eight.intra_node_bandwidth_GBps == 64  # PCIe Gen5 x16
    assert any("pairs only" in note for note in eight.assumptions)


def test_host_ram_defaults_scale_with_the_kind_of_node():
    assert make_cluster("RTX-4090", gpus_per_node=2).cpu_ram_per_node_bytes == 64 * GIB
    assert make_cluster("L4", gpus_per_node=1).cpu_ram_per_node_bytes == 64 * GIB
    assert make_cluster("MI300X").cpu_ram_per_node_bytes == 1024 * GIB


@pytest.mark.parametrize(
    ("gpu", "count", "figure", "why"),
    [
        ("H100-80GB", 8, "1024 GiB per node", "128 GiB per SXM GPU, half of the 2 TB that MLPerf's DGX A100 and"),
        ("MI300X", 8, "1024 GiB per node", "128 GiB per OAM GPU, two thirds of the 1.5 TiB that AMD's MLPerf"),
        ("L4", 2, "128 GiB per node", "64 GiB per PCIe GPU, half an SXM server's (a guess"),
        ("RTX-4090", 1, "32 GiB per node", "32 GiB per consumer or workstation GPU (a guess"),
    ],
)
def test_a_default_host_ram_says_where_it_comes_from_and_which_flag_sets_it(gpu, count, figure, why):
    """The figure the node is planned with (the reference: cpu_ram_per_node_bytes) is the one the assumption
    line prints, beside why that figure and the flag that replaces it; a given --cpu-ram-gb is not assumed."""
    cluster = make_cluster(gpu, gpus_per_node=count)
    lines = [line for line in cluster.assumptions if line.startswith("host RAM")]
    assert len(lines) == 1 and f"{cluster.cpu_ram_per_node_bytes / GIB:g} GiB per node" == figure, lines
    assert f"host RAM: {figure}, assumed: {why}" in lines[0] and lines[0].endswith("--cpu-ram-gb sets your nodes'")
    given = make_cluster(gpu, gpus_per_node=count, cpu_ram_gb=96)
    assert not any(line.startswith("host RAM") for line in given.assumptions)


def test_cpu_pseudo_device():
    host = resolve_gpu("cpu").memory_bytes  # the catalog's: the host's RAM
    cluster = make_cluster("cpu", gpus_per_node=2)
    assert cluster.gpu.kind == "cpu"
    # the two ranks share the host's RAM: each is planned half of it (the audit's gpt2-large "fit" in 2 x 23.5 GiB)
    assert cluster.cpu_ram_per_node_bytes == host and cluster.gpu.memory_bytes == host // 2
    assert any("shared by 2 rank(s) per node" in note for note in cluster.assumptions)
    assert make_cluster("cpu", gpus_per_node=1).gpu.memory_bytes == host
    assert make_cluster("cpu", gpus_per_node=4, cpu_ram_gb=64).gpu.memory_bytes == 16 * GIB
    # One ring step of the measured 2-rank gloo all-reduce (2(n-1) = 2 steps).
    import json
    from pathlib import Path

    profile = json.loads((Path(__file__).resolve().parent.parent / "benchmarks/results/cpu_profile.json").read_text())
    measured = profile["gloo_2_ranks"]["allreduce_latency_us"]
    assert cluster.intra_node_latency_us == pytest.approx(measured / 2, rel=0.05)
    assert any("placeholder" in note for note in cluster.assumptions)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"gpus_per_node": 0}, "gpus per node (--gpus-per-node) must be at least 1, not 0"),
        ({"nodes": 0}, "number of nodes (--nodes) must be at least 1, not 0"),
        ({"nodes": 2, "interconnect": "none"}, "2 nodes need a network"),
        ({"interconnect": "myrinet"}, "unknown interconnect 'myrinet'; use one of none, ib-ndr"),
        ({"intra_bw": 0}, "intra-node bandwidth (GB/s) must be more than 0"),
        ({"nodes": 2, "inter_bw": -5}, "inter-node bandwidth (GB/s) must be more than 0"),
        ({"cpu_ram_gb": 0}, "--cpu-ram-gb (CPU RAM per node) must be more than 0"),
        ({"nvme_gb": -1}, "--nvme-gb (NVMe per node, GiB) must be at least 0"),
        ({"nvme_gb": 100, "nvme_gbps": 0}, "--nvme-gbps (NVMe GB/s per node) must be more than 0"),
        ({"nvme_gb": 100, "nvme_gbps": float("inf")}, "--nvme-gbps (NVMe GB/s per node) must be a finite number"),
        ({"nvme_gbps": 25}, "--nvme-gbps is the bandwidth of the NVMe that --nvme-gb gives; add --nvme-gb"),
        ({"nvme_gb": 0, "nvme_gbps": 25}, "--nvme-gbps is the bandwidth of the NVMe that --nvme-gb gives"),
        ({"price_per_hour": -1}, "--price (USD per GPU-hour) must be at least 0"),
    ],
)
def test_bad_input_is_a_one_line_user_error(kwargs, message):
    with pytest.raises(UserInputError) as error:
        make_cluster("A100-80GB", **kwargs)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_unknown_gpu_is_a_user_error():
    with pytest.raises(UserInputError, match="unknown GPU 'B400'"):
        make_cluster("B400")


def test_the_model_itself_rejects_impossible_values():
    good = make_cluster("A100-80GB")
    with pytest.raises(ValidationError):
        ClusterSpec.model_validate({**good.model_dump(), "gpus_per_node": 0})
    with pytest.raises(ValidationError):
        ClusterSpec.model_validate({**good.model_dump(), "intra_node_bandwidth_GBps": 0})


@pytest.mark.parametrize("given", [{}, {"interconnect": "ib-ndr"}, {"inter_bw": 10}, {"price_per_hour": 2.5}])
def test_a_one_node_cluster_grown_to_two_is_the_two_node_cluster(given):
    """An elastic run's fallbacks on more nodes than the plan's one (ClusterSpec.with_nodes) are planned on what
    `make_cluster(nodes=2)` gives: the network (the GPU's typical one, or the one named), a bandwidth the user gave,
    the multi-node price (a new user's audit found 0 GB/s between the nodes; a review, the single-node price)."""
    grown = make_cluster("H100-80GB", gpus_per_node=8, nodes=1, **given).with_nodes(2)
    two = make_cluster("H100-80GB", gpus_per_node=8, nodes=2, **given)
    fields = ("gpu", "num_nodes", "inter_node_preset", "inter_node_bandwidth_GBps", "inter_node_latency_us")
    assert {key: getattr(grown, key) for key in fields} == {key: getattr(two, key) for key in fields}
    assert sorted(grown.assumptions) == sorted(two.assumptions)
