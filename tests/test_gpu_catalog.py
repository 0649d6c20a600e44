"""The GPU catalog: figures match the published reference, names resolve, unsupported dtypes fail clearly."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from pydantic import ValidationError

from planner.cost.prices import STALE_AFTER_DAYS, read_price_catalog
from planner.errors import UserInputError
from planner.hardware.gpus import (
    GPU_CATALOG_FILE,
    PCIE_X16_GBPS_PER_DIRECTION,
    Interconnect,
    find_gpu,
    load_gpu_catalog,
    normalize_gpu_name,
    pcie_bandwidth_GBps_per_direction,
    resolve_gpu,
)
from tests.reference_data import published_reference

GIB = 2**30
CATALOG = load_gpu_catalog()
REFERENCED = [spec for spec in CATALOG if spec.reference_gpu]

# Catalog dtype -> the yaml keys that hold the same figure, in the reference's naming.
TFLOPS_KEYS = {
    "fp32": ("fp32_tflops", "fp32_vector_tflops"),
    "tf32": ("tf32_tflops",),
    "fp16": ("fp16_tensor_tflops", "fp16_tensor_fp32acc_tflops", "fp16_matrix_tflops"),
    "bf16": ("bf16_tensor_tflops", "bf16_matrix_tflops"),
    "fp8": ("fp8_tflops",),
}


def reference_row(label: str) -> dict:
    rows = {row["gpu"]: row for row in published_reference()["gpu_specs"]["gpus"]}
    assert label in rows, f"reference_gpu '{label}' is not a row of gpu_specs.gpus"
    return rows[label]


def catalog_figures(spec) -> dict[str, tuple[float | None, tuple[str, ...]]]:
    """Field path -> (catalog value, yaml keys holding the same figure)."""
    figures = {
        "memory_bytes": (spec.memory_bytes / GIB, ("mem_gb",)),
        "memory_bandwidth_GBps": (spec.memory_bandwidth_GBps, ("mem_bw_GBps",)),
        "tdp_watts": (spec.tdp_watts, ("tdp_w",)),
    }
    for dtype, keys in TFLOPS_KEYS.items():
        figures[f"dense_tflops.{dtype}"] = (getattr(spec.dense_tflops, dtype), keys)
    return figures


def test_catalog_has_at_least_20_gpus_and_one_cpu_placeholder():
    gpus = [spec for spec in CATALOG if spec.kind == "gpu"]
    assert len(gpus) >= 20
    (cpu,) = [spec for spec in CATALOG if spec.kind == "cpu"]
    assert cpu.name == "cpu" and cpu.placeholder and cpu.confidence == "placeholder"
    assert cpu.dense_tflops.bf16 is None and cpu.dense_tflops.fp32 is not None


# Figures that depart from the shared reference row on purpose, each for a measurement its source cites: the
# reference prints the nominal memory, the catalog the memory the driver gives a program.
DEPART_FROM_REFERENCE = {("L40S", "memory_bytes"): "46068MiB"}  # nvidia-smi with ECC on, against 48 GB GDDR6


@pytest.mark.parametrize("spec", REFERENCED, ids=lambda spec: spec.name)
def test_figures_equal_the_reference_row_or_cite_another_source(spec):
    row = reference_row(spec.reference_gpu)
    for field, (ours, keys) in catalog_figures(spec).items():
        present = [key for key in keys if key in row]
        published = row[present[0]] if present else None
        source = spec.sources.get(field)
        if (spec.name, field) in DEPART_FROM_REFERENCE:
            assert source is not None and source.cited and DEPART_FROM_REFERENCE[spec.name, field] in source.note
            assert isinstance(published, (int, float)) and ours < published  # what the driver reports is less
            continue
        if isinstance(published, (int, float)):
            assert ours == pytest.approx(published), f"{spec.name} {field}: {ours} != reference {published}"
            assert source is not None and source.kind != "unsourced", f"{spec.name} {field} is in the reference row"
        elif isinstance(published, str) and " or " in published:  # "16 or 32"
            assert ours in [float(option) for option in published.split(" or ")], f"{spec.name} {field}"
        elif present and published is None:
            assert ours is None, f"{spec.name} {field}: reference says unsupported, catalog has {ours}"
        elif ours is not None:
            # Not in the row, or only as prose ("~835 (recalled)"): a document of its own, or marked unsourced.
            assert source is not None and source.kind != "reference", (
                f"{spec.name} {field}={ours} is not in the reference row; cite its source or mark it unsourced"
            )


@pytest.mark.parametrize("spec", REFERENCED, ids=lambda spec: spec.name)
def test_interconnect_matches_the_reference(spec):
    row = reference_row(spec.reference_gpu)
    link = spec.interconnect
    text = row.get("interconnect", "")
    if link.kind == "nvlink" and link.reach == "node":
        generations = {g["gen"]: g for g in published_reference()["gpu_specs"]["nvlink_generations"]}
        generation = generations[link.generation]
        assert link.bandwidth_GBps_bidirectional == generation["total_GBps"]
        assert link.bandwidth_GBps_per_direction == generation["per_dir_GBps"]
        assert link.links == generation["links"]
    elif link.kind == "pcie":
        assert link.bandwidth_GBps_per_direction == PCIE_X16_GBPS_PER_DIRECTION[spec.pcie_generation]
        stated = re.search(r"PCIe Gen(\d)", text)
        if stated:
            assert int(stated.group(1)) == spec.pcie_generation
    else:  # bridges and Infinity Fabric: the row quotes one total figure
        stated = re.search(r"(\d+(?:\.\d+)?)\s*GB/s", text)
        assert stated, f"{spec.name}: no bandwidth in reference text {text!r}"
        assert link.bandwidth_GBps_bidirectional == float(stated.group(1))


def test_pcie_table_matches_the_reference_texts():
    texts = [row.get("interconnect", "") for row in published_reference()["gpu_specs"]["gpus"]]
    checked = set()
    for text in texts:
        for generation, bidirectional in re.findall(r"Gen(\d) x16 \((\d+) GB/s bidir\)", text):
            assert PCIE_X16_GBPS_PER_DIRECTION[int(generation)] * 2 == float(bidirectional)
            checked.add(int(generation))
        for generation, per_direction in re.findall(r"Gen(\d) x16 \(~?(\d+) GB/s per direction\)", text):
            assert PCIE_X16_GBPS_PER_DIRECTION[int(generation)] == float(per_direction)
            checked.add(int(generation))
    assert checked == {3, 4, 5}
    assert pcie_bandwidth_GBps_per_direction(4, width=8) == 16


def test_entries_outside_the_reference_cite_no_reference_row_but_the_nvlink_table():
    generations = {g["gen"]: g for g in published_reference()["gpu_specs"]["nvlink_generations"]}
    for spec in CATALOG:
        if spec.reference_gpu is not None:
            continue
        for field, source in spec.sources.items():
            if source.kind != "reference":
                continue
            assert field == "interconnect" and "nvlink_generations" in source.note, f"{spec.name} {field}"
            generation = generations[spec.interconnect.generation]
            assert spec.interconnect.bandwidth_GBps_per_direction == generation["per_dir_GBps"], spec.name


def test_every_entry_cites_a_source_and_its_price_comes_from_the_price_catalog():
    """No recalled price: each GPU takes the cheapest on-demand price of planner/catalog/prices.yaml with that
    entry's source and date, or has none and says to pass --price (the cpu pseudo-device costs nothing)."""
    prices = read_price_catalog()
    raw = json.loads(GPU_CATALOG_FILE.read_text())["gpus"]
    assert [entry["name"] for entry in raw if "price_usd_per_hour" in entry] == ["cpu"]
    for spec in CATALOG:
        assert spec.source and spec.confidence, spec.name
        if spec.kind == "cpu":
            assert spec.price_usd_per_hour == 0.0
            continue
        cited = [entry for entry in prices.prices if entry.gpu == spec.name]
        if not cited:
            assert spec.price_usd_per_hour is None and spec.price_date is None, spec.name
            assert "--price" in spec.price_source and "--price" in spec.price_note()
            continue
        cheapest = min(cited, key=lambda entry: entry.on_demand)
        assert spec.price_usd_per_hour == cheapest.on_demand, spec.name
        assert spec.price_date == cheapest.date and cheapest.source in spec.price_source, spec.name
        assert (
            f"{cheapest.cloud} {cheapest.region}" in spec.price_source
            and cheapest.date.isoformat() in spec.price_source
        )


def test_a_price_older_than_the_limit_is_said_to_be_stale():
    spec = resolve_gpu("H100-80GB")
    assert spec.price_date is not None
    fresh = spec.price_date + dt.timedelta(days=STALE_AFTER_DAYS)
    assert "STALE" not in spec.price_note(fresh) and spec.price_note(fresh).startswith("$")
    late = spec.price_note(fresh + dt.timedelta(days=1))
    assert f"STALE: {STALE_AFTER_DAYS + 1} days old (over {STALE_AFTER_DAYS})" in late
    assert spec.with_price(2.0).price_note(fresh + dt.timedelta(days=999)) == "$2.00/GPU-hour [user override]"


def test_memory_is_nominal_gib():
    assert resolve_gpu("A100-80GB").memory_bytes == 80 * GIB
    assert resolve_gpu("A100-40GB").memory_bytes == 40 * GIB
    assert resolve_gpu("H100-NVL").memory_bytes == 94 * GIB


@pytest.mark.parametrize(
    "name, expected",
    [
        ("A100-80GB", "A100-80GB"),
        ("a100_80gb", "A100-80GB"),
        ("A100 80G", "A100-80GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIe-80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100-PCIe-40GB"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),
        ("h100-sxm", "H100-80GB"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA H200", "H200"),
        ("Tesla V100-SXM2-32GB", "V100-32GB"),
        ("Tesla V100-SXM2-16GB", "V100-16GB"),
        ("Tesla V100-PCIE-32GB", "V100-PCIe-32GB"),
        ("Tesla V100S-PCIE-32GB", "V100S"),
        ("Tesla T4", "T4"),
        ("t4", "T4"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("rtx4090", "RTX-4090"),
        ("NVIDIA GeForce RTX 3090", "RTX-3090"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA RTX A6000", "A6000"),
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI250X", "MI250X"),
        ("cpu", "cpu"),
    ],
)
def test_resolve_accepts_canonical_alias_and_nvml_names(name, expected):
    assert resolve_gpu(name).name == expected


def test_every_listed_name_resolves_to_its_own_entry():
    for spec in CATALOG:
        for name in (spec.name, *spec.aliases, *spec.driver_names):
            assert find_gpu(name) is spec, name


def test_normalization_ignores_case_separators_vendor_words_and_the_b_of_gb():
    assert normalize_gpu_name("NVIDIA A100-SXM4-80GB") == normalize_gpu_name("a100 sxm4_80g")
    assert normalize_gpu_name("A10") != normalize_gpu_name("A100")


def test_unknown_gpu_suggests_close_names():
    with pytest.raises(UserInputError) as error:
        resolve_gpu("a100-90gb")
    message = str(error.value)
    assert message.startswith("unknown GPU 'a100-90gb'; did you mean 'A100-80GB', 'A100-40GB'")
    assert "\n" not in message


def test_ambiguous_short_name_lists_the_variants():
    with pytest.raises(UserInputError, match=r"unknown GPU 'h100'; did you mean 'H100-80GB', 'H100-NVL', 'H100-PCIe'"):
        resolve_gpu("h100")


def test_name_far_from_everything_points_to_the_gpus_command():
    with pytest.raises(UserInputError, match="hardware-selector gpus"):
        resolve_gpu("zzzz-9000")


def test_peak_tflops_returns_the_dense_figure():
    h100 = resolve_gpu("H100-80GB")
    assert h100.peak_tflops("bf16") == 989
    assert h100.peak_tflops("fp8") == 1979
    assert h100.peak_tflops("FP32") == 67


def test_bf16_on_v100_is_a_user_error_with_the_alternative():
    with pytest.raises(UserInputError) as error:
        resolve_gpu("V100-32GB").peak_tflops("bf16")
    assert str(error.value) == "V100-32GB has no bf16 support; use fp16-mixed"


@pytest.mark.parametrize(
    "gpu, dtype, message",
    [
        ("T4", "bf16", "T4 has no bf16 support; use fp16-mixed"),
        ("T4", "tf32", "T4 has no tf32 support; use fp32"),
        ("A100-80GB", "fp8", "A100-80GB has no fp8 support; use bf16-mixed"),
        ("cpu", "bf16", "cpu has no bf16 support; use fp32"),
    ],
)
def test_unsupported_dtypes(gpu, dtype, message):
    spec = resolve_gpu(gpu)
    assert not spec.supports(dtype)
    with pytest.raises(UserInputError) as error:
        spec.peak_tflops(dtype)
    assert str(error.value) == message


def test_unknown_dtype():
    with pytest.raises(UserInputError, match="unknown dtype 'int4'"):
        resolve_gpu("A100-80GB").peak_tflops("int4")


def test_with_price_overrides_without_touching_the_catalog():
    original = resolve_gpu("H100-80GB")
    cheaper = original.with_price(2.25)
    assert cheaper.price_usd_per_hour == 2.25 and cheaper.price_source == "user override"
    assert resolve_gpu("H100-80GB").price_usd_per_hour == original.price_usd_per_hour != 2.25
    with pytest.raises(UserInputError):
        original.with_price(-1)


def test_interconnect_rejects_inconsistent_bandwidths():
    with pytest.raises(ValidationError):
        Interconnect(
            kind="nvlink",
            generation="NVLink 3",
            reach="node",
            bandwidth_GBps_per_direction=300,
            bandwidth_GBps_bidirectional=300,
        )


NEW_GPUS = ("H800", "H20", "GB200", "B300", "MI325X", "MI355X")


@pytest.mark.parametrize("name", NEW_GPUS)
def test_2025_gpus_are_consistent_and_plan(name, capsys):
    """No reference row: each figure names its own source, FP8 is twice the dense BF16 rate as on every
    Hopper/Blackwell/CDNA3-4 part, and a plan on them runs."""
    import json

    from hardware_selector import main

    spec = resolve_gpu(name)
    assert spec.reference_gpu is None and set(spec.figure_paths()) <= set(spec.sources)
    assert spec.dense_tflops.fp8 == pytest.approx(2 * spec.dense_tflops.bf16, abs=1.0)  # datasheets round
    assert spec.interconnect.bandwidth_GBps_bidirectional == 2 * spec.interconnect.bandwidth_GBps_per_direction
    argv = ["plan", "--model", "llama-3.1-70b", "--gpu", name, "--gpus-per-node", "8", "--nodes", "2",
            "--global-batch", "256", "--seq-len", "4096", "--json"]  # fmt: skip
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["best"]["throughput"]["tokens_per_s"] > 0


def test_h800_is_an_h100_with_a_narrower_nvlink():
    h800, h100 = resolve_gpu("H800"), resolve_gpu("H100-80GB")
    assert h800.dense_tflops == h100.dense_tflops and h800.memory_bytes == h100.memory_bytes
    assert h800.interconnect.bandwidth_GBps_per_direction < h100.interconnect.bandwidth_GBps_per_direction
