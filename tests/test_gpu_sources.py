"""Every figure of the GPU catalog says where it comes from; the nine GPUs of issue 34 cite documents.

The reference here is what each document printed, read on the day its source records: `PRINTED` quotes it
(the quote must appear in the figure's source note) with the number in the document's unit, and the catalog
figure must be that number in our unit, halved where the document printed a rate with sparsity.
"""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from hardware_selector_cli.app import main
from planner.hardware.gpu_sources import FigureSource
from planner.hardware.gpus import load_gpu_catalog, resolve_gpu

CATALOG = load_gpu_catalog()
NINE = ("GB200", "B200", "B300", "H20", "H200", "MI300X", "MI325X", "MI355X", "L40S")
KEY_FIGURES = (
    "dense_tflops.bf16",
    "dense_tflops.fp8",
    "memory_bytes",
    "memory_bandwidth_GBps",
    "interconnect",
    "tdp_watts",
)

# Key figures of the nine that no readable document printed: kept, marked "unsourced" (recalled) in the
# catalog, listed in docs/hardware.md. Each must really be marked unsourced, so the list cannot go stale.
# Empty since issue 34's fourth pass (the H20's BF16 and FP8 cite the LMSYS/SGLang H20 vs H800 table).
UNSOURCED_ALLOWLIST: set[tuple[str, str]] = set()

# Every figure of the whole catalog still marked "unsourced" (recalled), the cpu placeholder's apart: 55 before
# issue 34's second pass, 17 after it, 10 after its third, 4 after its fourth, none since 2026-11-29 (the A10G's
# TF32 and BF16 and the H800's FP32 and TF32, which no readable document prints, are derived from their cited FP16
# by a sibling die's ratios: DERIVED below). None may join it.
STILL_UNSOURCED: set[tuple[str, str]] = set()

# Figures no document read here prints, computed from cited ones: (gpu, figure) -> (base figure, like GPU).
DERIVED = {
    ("A10G", "dense_tflops.tf32"): ("dense_tflops.fp16", "A10"),  # one Ampere die: TF32 at half FP16
    ("A10G", "dense_tflops.bf16"): ("dense_tflops.fp16", "A10"),  # BF16 at the FP16 rate
    ("H800", "dense_tflops.fp32"): ("dense_tflops.fp16", "H100-80GB"),  # the H100 SXM's SMs and clocks
    ("H800", "dense_tflops.tf32"): ("dense_tflops.fp16", "H100-80GB"),
}

# (gpu, figure) -> (quote from the document, number in the document's unit, to our unit, printed with sparsity)
TERA, GB, SAME = 1000, 1000, 1
PRINTED: dict[tuple[str, str], tuple[str, float, float, bool]] = {
    ("GB200", "dense_tflops.bf16"): ("'FP16/BF16 Tensor Core 5 PFLOPS'", 5, TERA, True),
    ("GB200", "dense_tflops.fp8"): ("'FP8/FP6 Tensor Core 10 PFLOPS'", 10, TERA, True),
    ("GB200", "memory_bytes"): ("'186 GB HBM3E'", 186, SAME, False),
    ("GB200", "memory_bandwidth_GBps"): ("'8 TB/s'", 8, GB, False),
    ("GB200", "interconnect"): ("'5th Gen NVLink: 1.8 TB/s'", 1.8, GB, False),
    ("GB200", "tdp_watts"): ("Configurable up to 1,200 W", 1200, SAME, False),
    ("B200", "dense_tflops.bf16"): ("'FP16/BF16 Tensor Core 4.5 PFLOPS'", 4.5, TERA, True),
    ("B200", "dense_tflops.fp8"): ("'FP8/FP6 Tensor Core 9 PFLOPS'", 9, TERA, True),
    ("B200", "memory_bytes"): ("'180 GB HBM3E'", 180, SAME, False),
    ("B200", "memory_bandwidth_GBps"): ("'7.7 TB/s'", 7.7, GB, False),
    ("B200", "interconnect"): ("'5th Gen NVLink: 1.8 TB/s'", 1.8, GB, False),
    ("B200", "tdp_watts"): ("Configurable up to 1,000 W", 1000, SAME, False),
    ("B300", "dense_tflops.bf16"): ("'BF16 | 2250 | 4500'", 2250, SAME, False),
    ("B300", "dense_tflops.fp8"): ("'FP8 | 4500 | 9000'", 4500, SAME, False),
    ("B300", "memory_bytes"): ("'**Max capacity:** 288 GB", 288, SAME, False),
    ("B300", "memory_bandwidth_GBps"): ("'**Bandwidth:** 8 TB/s per GPU", 8, GB, False),
    ("B300", "interconnect"): ("1.8 TB/s bidirectional (18 links x 100 GB/s)", 1.8, GB, False),
    ("B300", "tdp_watts"): ("up to 1,100W", 1100, SAME, False),
    ("H20", "dense_tflops.fp16"): ("FP16稠密算力为148TFLOPS", 148, SAME, False),
    ("H20", "memory_bytes"): ("'96 GB HBM3", 96, SAME, False),
    ("H20", "memory_bandwidth_GBps"): ("4,000 GB/s", 4000, SAME, False),
    ("H20", "interconnect"): ("'NVLink 4.0 (900 GB/s)", 900, SAME, False),
    ("H20", "tdp_watts"): ("'400W TDP", 400, SAME, False),
    ("H200", "dense_tflops.bf16"): ("1,979 TFLOPS each of FP16 and BFLOAT16 with sparsity", 1979, SAME, True),
    ("H200", "dense_tflops.fp8"): ("3,958 TFLOPS of FP8 Tensor Core performance with sparsity", 3958, SAME, True),
    ("H200", "memory_bytes"): ("'accelerator_memory_capacity': '141 GB'", 141, SAME, False),
    ("H200", "memory_bandwidth_GBps"): ("HBM3e running at 4.8TB/s", 4.8, GB, False),
    ("H200", "interconnect"): ("'18x 4th Gen NVLink, 900GB/s'", 900, SAME, False),
    ("H200", "tdp_watts"): ("'H200 TGP 700W'", 700, SAME, False),
    ("L40S", "dense_tflops.bf16"): ("'BFLOAT16 Tensor Core TFLOPS ... 362.05 | 733*'", 362.05, SAME, False),
    ("L40S", "dense_tflops.fp8"): ("'FP8 Tensor Core ... 733 | 1,466*'", 733, SAME, False),
    # What the driver reports with ECC on (nvidia-smi, in MiB), not the data sheet's nominal 48 GB GDDR6.
    ("L40S", "memory_bytes"): ("'1MiB /  46068MiB'", 46068, 1 / 1024, False),
    ("L40S", "memory_bandwidth_GBps"): ("'Memory Bandwidth 864GB/s'", 864, SAME, False),
    ("L40S", "interconnect"): ("PCIe Gen4 x16: 64GB/s bidirectional", 64, SAME, False),
    ("L40S", "tdp_watts"): ("'Max Power Consumption ... 350W'", 350, SAME, False),
    ("MI300X", "dense_tflops.bf16"): ("'Matrix BF16 ... 1307.4'", 1307.4, SAME, False),
    ("MI300X", "dense_tflops.fp8"): ("'Matrix FP8 ... 2614.9'", 2614.9, SAME, False),
    ("MI300X", "memory_bytes"): ("'VRAM (GiB) 192'", 192, SAME, False),
    ("MI300X", "memory_bandwidth_GBps"): ("peak memory bandwidth of the GPU is 5.3 TB per second", 5.3, GB, False),
    ("MI300X", "interconnect"): ("'IB Bandwidth 896 GB/s'", 896, SAME, False),
    ("MI300X", "tdp_watts"): ("MI300X-NPS1-SPX-192GB-750W", 750, SAME, False),
    ("MI325X", "dense_tflops.bf16"): ("'FP16 / BF16 1,307.4 TFLOPS'", 1307.4, SAME, False),
    ("MI325X", "dense_tflops.fp8"): ("'FP8 Performance 2,614.9 TFLOPS'", 2614.9, SAME, False),
    ("MI325X", "memory_bytes"): ("'VRAM (GiB) 256'", 256, SAME, False),
    ("MI325X", "memory_bandwidth_GBps"): ("'Features 6 TB/s of peak memory bandwidth'", 6, GB, False),
    ("MI325X", "tdp_watts"): ("'TDP ~1,000 W'", 1000, SAME, False),
    ("MI355X", "dense_tflops.fp32"): ("MI355X máme 157,3 TFLOPS", 157.3, SAME, False),
    ("MI355X", "memory_bytes"): ("'VRAM (GiB) 288'", 288, SAME, False),
    ("MI355X", "memory_bandwidth_GBps"): ("offer up to 8 TB/s of bandwidth", 8, GB, False),
    ("MI355X", "tdp_watts"): ("will consume up to 1400W", 1400, SAME, False),
    # Issue 34's second pass: the GPUs whose figures were all or partly recalled.
    ("L40", "memory_bytes"): ("'GPU Memory | 48 GB GDDR6 with ECC'", 48, SAME, False),
    ("L40", "memory_bandwidth_GBps"): ("'Memory Bandwidth | 864GB/s'", 864, SAME, False),
    ("L40", "dense_tflops.fp32"): ("'FP32 TFLOPS | 90.5 | 91.6'", 90.5, SAME, False),
    ("L40", "dense_tflops.tf32"): ("'TF32 Tensor Core TFLOPS | 90.5 | 181* |'", 181, SAME, True),
    ("L40", "dense_tflops.bf16"): ("'BFLOAT16 Tensor Core TFLOPS | 181.05 | 362.1* |'", 362.1, SAME, True),
    ("L40", "dense_tflops.fp8"): ("'FP8 Tensor Core | 362 | 724* |'", 724, SAME, True),
    ("L40", "interconnect"): ("'Interconnect Interface | PCIe Gen4 x16: 64GB/s bidirectional'", 64, SAME, False),
    ("L40", "tdp_watts"): ("'Max Power Consumption | 300W | 350W'", 300, SAME, False),
    ("A6000", "memory_bytes"): ("'GPU Memory | 48 GB GDDR6 with ECC'", 48, SAME, False),
    ("A6000", "memory_bandwidth_GBps"): ("'Memory Bandwidth | 768 GB/s'", 768, SAME, False),
    ("A6000", "dense_tflops.fp32"): ("'Desempeño FP32 (flotante) | 38.71 TFLOPS'", 38.71, SAME, False),
    ("A6000", "dense_tflops.bf16"): ("~309.7 TFLOPS, with structured sparsity", 309.7, SAME, True),
    ("A6000", "tdp_watts"): ("'Max Power Consumption | 300W'", 300, SAME, False),
    ("H100-NVL", "dense_tflops.fp32"): ("'FP32 | 67 TFLOPS | 60 TFLOPS'", 60, SAME, False),
    ("H100-NVL", "dense_tflops.tf32"): ("'TF32 Tensor Core | 989 TFLOPS | 835 TFLOPS'", 835, SAME, True),
    ("H100-NVL", "dense_tflops.bf16"): ("'BFLOAT16 Tensor Core | 1979 TFLOPS | 1671 TFLOPS'", 1671, SAME, True),
    ("H100-NVL", "dense_tflops.fp8"): ("'FP8 Tensor Core | 3958 TFLOPS | 3341 TFLOPS'", 3341, SAME, True),
    ("H100-NVL", "tdp_watts"): ("'TDP 功耗 | 700 W | 400 W'", 400, SAME, False),
    ("H800", "memory_bytes"): ("'Memory 80GB'", 80, SAME, False),
    ("H800", "memory_bandwidth_GBps"): ("peak memory bandwidth of 3.35 TB/s", 3.35, GB, False),
    ("H800", "interconnect"): ("only 400 GB/s total aggregate bidirectional bandwidth", 400, SAME, False),
    ("H800", "tdp_watts"): ("'Power 700W'", 700, SAME, False),
    ("MI250X", "interconnect"): ("'IB Bandwidth 800 GB/s'", 800, SAME, False),
    ("MI250X", "tdp_watts"): ("TDP is 560W", 560, SAME, False),
    ("A100-PCIe-40GB", "dense_tflops.tf32"): ("312 TFLOPS TF32", 312, SAME, True),
    ("A100-PCIe-80GB", "dense_tflops.fp16"): ("624 TFLOPS BF16/FP16 (2:4 sparse)", 624, SAME, True),
    ("H100-PCIe", "dense_tflops.fp16"): ("'| NVIDIA H100 PCIe | 51.0 | 378.0 | 756 | 756 |", 756, SAME, False),
    ("H200", "dense_tflops.tf32"): ("'| NVIDIA H200 SXM | 67.0 | 494.5 |", 494.5, SAME, False),
    ("L4", "dense_tflops.tf32"): ("'TF32 Tensor Core 120 TFLOPS | Sparsity'", 120, SAME, True),
    ("RTX-4090", "dense_tflops.tf32"): ("'TF32: 82.58 TFLOPS, with sparsity: 165.15 TFLOPS'", 82.58, SAME, False),
    # Issue 34's third pass.
    ("V100S", "tdp_watts"): ("niezmienne pozostaje TDP, równe 250 W", 250, SAME, False),
    ("RTX-3090", "dense_tflops.tf32"): ('case "geforce3090": gpu_tflops_per_sec = 35.6', 35.6, SAME, False),
    ("A6000", "dense_tflops.tf32"): ('case "a6000": gpu_tflops_per_sec = 77.4', 77.4, SAME, False),
    ("MI325X", "interconnect"): ("'| MI325X | 64 | 7 | 448 | 896 |'", 896, SAME, False),
    ("MI355X", "interconnect"): ("'| MI355X | 76.5 | 7 | 535.5 | 1071 |'", 1071, SAME, False),
    ("MI355X", "dense_tflops.bf16"): ("the formula gives 2516.6", 2516.6, SAME, False),
    ("MI355X", "dense_tflops.fp16"): ("the formula gives 2516.6", 2516.6, SAME, False),
    # Issue 34's fourth pass.
    ("H20", "dense_tflops.bf16"): ("'FP16/BF16 Compute | 148 TFLOPS | 989 TFLOPS'", 148, SAME, False),
    ("H20", "dense_tflops.fp8"): ("'FP8 Compute | 296 TFLOPS | 1979 TFLOPS'", 296, SAME, False),
    ("H800", "dense_tflops.fp16"): ("'FP16/BF16 Compute | 148 TFLOPS | 989 TFLOPS'", 989, SAME, False),
    ("H800", "dense_tflops.fp8"): ("'FP8 Compute | 296 TFLOPS | 1979 TFLOPS'", 1979, SAME, False),
    ("A10G", "dense_tflops.fp32"): ("'| A10G | Ampere | 35 | 35 | 70 | [Datasheet][a10g] |'", 35, SAME, False),
    ("A10G", "dense_tflops.fp16"): ("'| A10G | Ampere | 35 | 35 | 70 | [Datasheet][a10g] |'", 70, SAME, False),
}


def catalog_value(spec, figure: str) -> float:
    """The figure in the unit documents print: GB (we store GiB of the same count), bidirectional link GB/s."""
    if figure == "memory_bytes":
        return spec.memory_bytes / 2**30
    if figure == "interconnect":
        return spec.interconnect.bandwidth_GBps_bidirectional
    if figure.startswith("dense_tflops."):
        return getattr(spec.dense_tflops, figure.split(".")[1])
    return getattr(spec, figure)


@pytest.mark.parametrize("spec", CATALOG, ids=lambda spec: spec.name)
def test_every_figure_has_a_dated_url_or_says_where_else_it_comes_from(spec):
    for figure in spec.figure_paths():
        assert figure in spec.sources, f"{spec.name} {figure} has no source; mark it unsourced if it was recalled"
        source = spec.sources[figure]
        if source.cited:
            assert source.url.startswith("https://") and source.date and source.date_kind, f"{spec.name} {figure}"
        else:
            assert source.kind in ("reference", "derived", "unsourced") and source.note, f"{spec.name} {figure}"


@pytest.mark.parametrize("name", NINE)
def test_the_nine_cite_a_document_for_each_key_figure_but_the_allowlist(name):
    spec = resolve_gpu(name)
    for figure in KEY_FIGURES:
        source = spec.sources[figure]
        if (name, figure) in UNSOURCED_ALLOWLIST:
            assert source.kind == "unsourced", (
                f"{name} {figure} is allowlisted but now {source.kind}: drop it from the list"
            )
        else:
            assert source.cited, f"{name} {figure}: {source.kind}"


def test_no_recalled_figure_joins_the_unsourced_list_and_the_list_keeps_up():
    unsourced = {
        (spec.name, figure)
        for spec in CATALOG
        if not spec.placeholder
        for figure, source in spec.sources.items()
        if source.kind == "unsourced"
    }
    assert not unsourced - STILL_UNSOURCED, f"newly unsourced (cite a document instead): {unsourced - STILL_UNSOURCED}"
    assert not STILL_UNSOURCED - unsourced, f"now cited, drop from STILL_UNSOURCED: {STILL_UNSOURCED - unsourced}"
    assert not STILL_UNSOURCED


def test_no_entrys_summary_or_notes_name_a_recalled_value():
    """The entry-level text beside the per-figure sources cites what was read or leaves the value out (until
    2026-11-29 the MI355X's missing TF32, the MI250X's matrix FP32, the RTX 4090's whitepaper check and the PCIe
    cards' NVLink bridge rate were "recalled"; docs/hardware.md)."""
    for spec in CATALOG:
        for text in (spec.source, spec.confidence, spec.notes):
            assert "recalled" not in (text or ""), f"{spec.name}: {text}"


def test_derived_figures_are_their_rule_applied_to_cited_figures():
    """A derived figure is the entry's own base figure at another GPU's ratio (gpu_sources.DerivedRule), and every
    input is itself read at a source (a document or the shared reference row), never recalled nor derived."""
    derived = {
        (spec.name, figure): (source.derived_from.base, source.derived_from.like_gpu)
        for spec in CATALOG
        for figure, source in spec.sources.items()
        if source.derived_from is not None
    }
    assert derived == DERIVED
    for (name, figure), (base, like_name) in DERIVED.items():
        spec, like = resolve_gpu(name), resolve_gpu(like_name)
        for owner, path in ((spec, base), (like, figure), (like, base)):
            assert owner.sources[path].kind in ("vendor", "secondary", "reference"), (owner.name, path)
        expected = catalog_value(spec, base) * catalog_value(like, figure) / catalog_value(like, base)
        assert catalog_value(spec, figure) == pytest.approx(expected, rel=1e-9), (name, figure)
        assert spec.sources[figure].note.startswith("derived: ") and "Premise: " in spec.sources[figure].note


@pytest.mark.parametrize("key", sorted(PRINTED), ids=lambda key: f"{key[0]}-{key[1]}")
def test_cited_figures_are_what_the_document_printed(key):
    name, figure = key
    quote, number, to_our_unit, sparse = PRINTED[key]
    source = resolve_gpu(name).sources[figure]
    assert source.cited and quote in source.note, f"{name} {figure}: note does not quote {quote!r}"
    expected = number * to_our_unit / (2 if sparse else 1)
    # rel 1e-3: two sheets print one more decimal than the shared reference keeps (989.5 -> 989, 362.05 -> 362).
    assert catalog_value(resolve_gpu(name), figure) == pytest.approx(expected, rel=1e-3)


def test_rates_printed_with_sparsity_say_how_the_dense_figure_was_derived():
    for spec in CATALOG:
        for figure, source in spec.sources.items():
            text = source.note.lower()
            if figure.startswith("dense_tflops.") and source.cited and "sparsity" in text:
                assert "dense" in text, (
                    f"{spec.name} {figure}: printed with sparsity, note does not say the dense figure"
                )


def test_gpus_json_prints_the_source_of_every_figure(capsys):
    assert main(["gpus", "--json"]) == 0
    entries = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
    for spec in CATALOG:
        printed = entries[spec.name]["sources"]
        assert set(spec.figure_paths()) <= set(printed), spec.name
    for name in NINE:
        for figure in KEY_FIGURES:
            source = entries[name]["sources"][figure]
            assert (source["url"] and source["date"]) or (name, figure) in UNSOURCED_ALLOWLIST, f"{name} {figure}"
    b200 = entries["B200"]["sources"]["memory_bandwidth_GBps"]
    assert b200["url"] == "https://nvdam.widen.net/s/wwnsxrhm2w/blackwell-datasheet-3384703"
    assert b200["date"] == "2026-11-26" and b200["date_kind"] == "accessed" and "atineoSE" in b200["read_via"]


def test_gpus_table_footnotes_say_where_each_number_came_from(capsys):
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    footnotes = {line.split("] ", 1)[1].split(":", 1)[0]: line for line in out.splitlines() if line.startswith("[")}
    assert set(footnotes) == {spec.name for spec in CATALOG}
    assert "mem, mem-bw, fp32, tf32, fp16, bf16, fp8, link, power: vendor https://nvdam.widen.net/" in footnotes["B200"]
    assert "bf16, fp8: secondary https://lmsys.org/blog/2025-09-26-sglang-ant-group (2025-09-26)" in footnotes["H20"]
    assert "unsourced" not in footnotes["H20"]
    assert "tf32, bf16: derived (fp16 at the A10's ratio)" in footnotes["A10G"]
    assert "fp32, tf32: derived (fp16 at the H100-80GB's ratio)" in footnotes["H800"]
    assert not any("unsourced (recalled)" in line for line in footnotes.values())
    assert "shared reference (gpu_specs row 'H100 SXM5 80GB')" in footnotes["H100-80GB"]
    assert "mem, mem-bw, fp32, link: unsourced (measured)" in footnotes["cpu"]


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "secondary", "url": "https://example.org/sheet", "note": "no date"},
        {"kind": "vendor", "url": "http://example.org/sheet", "date": "2025-01-01", "date_kind": "published"},
        {"kind": "vendor", "url": "https://example.org/sheet", "date": "Jan 2025", "date_kind": "published"},
        {"kind": "unsourced", "url": "https://example.org/sheet", "note": "recalled"},
        {"kind": "unsourced", "note": ""},
        {"kind": "reference", "note": "row", "unknown": 1},
        {"kind": "derived", "note": "derived: no rule"},
        {"kind": "derived", "note": "derived", "derived_from": {"base": "dense_tflops.fp64", "like_gpu": "A10"}},
        {
            "kind": "derived",
            "url": "https://example.org",
            "note": "derived",
            "derived_from": {"base": "memory_bytes", "like_gpu": "A10"},
        },
        {
            "kind": "secondary",
            "url": "https://example.org/sheet",
            "date": "2025-01-01",
            "date_kind": "published",
            "note": "x",
            "derived_from": {"base": "memory_bytes", "like_gpu": "A10"},
        },
    ],
)
def test_a_source_without_its_url_date_or_note_is_rejected(fields):
    with pytest.raises(ValidationError):
        FigureSource.model_validate(fields)


def test_the_cpu_entrys_memory_note_says_what_its_figure_is_and_claims_no_detection():
    """The note said the figure was "replaced by host RAM at detection time"; nothing replaces it (a plan for
    --gpu cpu uses it unless --cpu-ram-gb is given: the reference is make_cluster's own figure)."""
    from planner.hardware.cluster import make_cluster

    spec = resolve_gpu("cpu")
    note = spec.sources["memory_bytes"].note
    assert make_cluster("cpu", gpus_per_node=1).cpu_ram_per_node_bytes == spec.memory_bytes
    assert f"({spec.memory_bytes / 2**30:.3g} GiB)" in note and "--cpu-ram-gb sets it" in note
    assert all("detection time" not in source.note for source in spec.sources.values())


@pytest.mark.parametrize("width", [60, 80, 100, 130, 160])
def test_the_gpus_table_never_cuts_a_figure(capsys, monkeypatch, width):
    """An audit: at 80 columns the GiB and $/h columns were blank and TFLOP/s read "3…". Whole columns give way
    (the caption names them); every name, its memory, bf16, fp8 and source number stay whole at every width, as
    `gpus --json` gives them."""
    from rich.console import Console

    from hardware_selector_cli import hardware

    monkeypatch.setattr(hardware, "_console", lambda: Console(width=width))
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    table = out.split("$/h: the cheapest")[0].splitlines()
    assert "…" not in out and max(map(len, table)) <= width
    rows = {line.split()[0]: line.split() for line in table if line.strip() and line.split()[-1].startswith("[")}
    for number, spec in enumerate(CATALOG, start=1):
        row = rows[spec.name]
        assert row[-1] == f"[{number}]" and f"{round(spec.memory_gib, 1):g}" in row
        for value in (spec.dense_tflops.bf16, spec.dense_tflops.fp8):
            assert ("-" if value is None else f"{value:g}") in row
    if width < 130:
        assert "left out for this terminal's width; --json has every figure" in " ".join(out.split())
