"""`gpus` and `detect`: the GPU catalog and what this machine has.

Neither command imports torch: the catalog is JSON and detection goes through
NVML (pynvml), so both stay fast and work on a CPU-only box.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import typer

from planner.errors import UserInputError
from planner.units import format_bytes

if TYPE_CHECKING:  # pydantic models, imported by the commands that use them: `--help` builds none of them
    from planner.hardware.detect import DetectionReport
    from planner.hardware.gpus import GpuSpec, Interconnect

CPU_ONLY_HINT = (
    "Plan for a target GPU with --gpu, e.g. `hardware-selector plan --model llama-3-8b --gpu H100-80GB`; "
    "list them with `hardware-selector gpus`."
)


PIPED_WIDTH = 160


def _tflops(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _console():
    from rich.console import Console

    # Piped or captured output gets a wide page instead of rich's 80-column default,
    # so tables stay readable in files and logs; a terminal keeps its own width.
    return Console() if sys.stdout.isatty() else Console(width=PIPED_WIDTH)


def _short_link(link: Interconnect) -> str:
    short = {
        "nvlink": link.generation,
        "pcie": link.generation.replace(" x16", ""),
        "infinity-fabric": "Infinity Fabric",
        "host-memory": "host memory",
    }[link.kind]
    return short + (" (pairs)" if link.reach == "pair" else "")


# The columns a narrow terminal drops first: the text, then the figures a plan reads least. Memory, bf16, fp8 and
# the source number always stay (`gpus --json` has every figure).
GPUS_DROP_ORDER = ("confidence", "link", "fp16", "HBM GB/s", "GB/s/dir", "$/h", "fp32")


def _cells(number: int, spec: GpuSpec) -> dict[str, str]:
    tflops = spec.dense_tflops
    return {
        "GiB": f"{round(spec.memory_gib, 1):g}",  # a part whose driver reports less than its nominal GB: 45 (L40S)
        "HBM GB/s": f"{spec.memory_bandwidth_GBps:g}",
        "bf16": _tflops(tflops.bf16),
        "fp16": _tflops(tflops.fp16),
        "fp8": _tflops(tflops.fp8),
        "fp32": _tflops(tflops.fp32),
        "link": _short_link(spec.interconnect),
        "GB/s/dir": f"{spec.interconnect.bandwidth_GBps_per_direction:g}",
        "$/h": "-" if spec.price_usd_per_hour is None else f"{spec.price_usd_per_hour:.2f}",
        "confidence": spec.confidence,
        "src": f"[{number}]",
    }


def _print_catalog(specs: list[GpuSpec]) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from planner.hardware.gpu_sources import summarize_sources

    from .models import numeric_columns

    rows = [_cells(number, spec) for number, spec in enumerate(specs, start=1)]
    names = [spec.name + (" (placeholder)" if spec.placeholder else "") for spec in specs]
    console = _console()
    # A figure is never cut ("3…" at 80 columns, an audit): whole columns give way, said in the caption.
    name_width = max(map(len, names), default=4)
    shown = numeric_columns(rows, console.width, name_width, drop_order=GPUS_DROP_ORDER)
    dropped = [column for column in (rows[0] if rows else {}) if column not in shown]
    table = Table(
        title=f"GPU catalog ({len(specs)} entries; dense TFLOPs, '-' = unsupported)",
        caption=f"{', '.join(dropped)} left out for this terminal's width; --json has every figure"
        if dropped
        else None,
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("name", no_wrap=True, min_width=name_width)
    for column in shown:
        widest = max(len(column), *(len(row[column]) for row in rows))
        left = column in ("link", "confidence")
        table.add_column(column, justify="left" if left else "right", no_wrap=True, min_width=widest)
    for name, row in zip(names, rows, strict=True):
        table.add_row(escape(name), *(escape(row[column]) for column in shown))
    console.print(table)

    def line(text: str) -> None:
        console.print(text, soft_wrap=True, markup=False, highlight=False)

    line(
        "$/h: the cheapest on-demand price per GPU-hour that planner/catalog/prices.yaml cites (its cloud, source "
        "and date: `hardware-selector gpus --json`), '-' where it cites none (pass --price). Where each figure comes from, "
        "per GPU (`hardware-selector gpus --json` gives every figure's URL, date and what the document printed):"
    )
    for number, spec in enumerate(specs, start=1):
        groups = summarize_sources(spec.sources, spec.figure_paths())
        line(f"[{number}] {spec.name}: " + "; ".join(f"{', '.join(labels)}: {text}" for text, labels in groups))


def _pcie(generation: int | None, width: int | None) -> str:
    return f"Gen{generation if generation is not None else '?'} x{width if width is not None else '?'}"


def _print_detection(report: DetectionReport) -> None:
    from rich.table import Table

    console = _console()

    def line(text: str) -> None:
        console.print(text, soft_wrap=True, markup=False, highlight=False)

    if report.cpu_only:
        reason = report.nvml_error or "NVML found no devices"
        line(f"No NVIDIA GPU detected (NVML: {reason}). {CPU_ONLY_HINT}")
    else:
        line(f"NVIDIA driver {report.driver_version or '?'}, CUDA {report.cuda_driver_version or '?'}")
        table = Table(title=f"{len(report.gpus)} GPU(s)")
        for column in ("#", "name", "memory", "CC", "PCIe now/max", "NVLinks", "catalog"):
            table.add_column(column)
        for gpu in report.gpus:
            pcie = gpu.pcie
            table.add_row(
                str(gpu.index),
                gpu.name,
                format_bytes(gpu.memory_total_bytes),
                gpu.compute_capability or "?",
                f"{_pcie(pcie.current_generation, pcie.current_width)} / {_pcie(pcie.max_generation, pcie.max_width)}",
                str(gpu.active_nvlinks),
                gpu.catalog_name or "not in catalog",
            )
        console.print(table)
        line(f"Topology: {report.nvlink.summary}")
        if report.nvlink.pairs and not report.nvlink.all_to_all:
            line("  " + ", ".join(f"{p.gpu_a}-{p.gpu_b}:{p.links}" for p in report.nvlink.pairs))
        for note in report.nvlink.notes:
            line(f"  note: {note}")

    host = report.host
    ram = (
        f"{format_bytes(host.ram_total_bytes)} total, {format_bytes(host.ram_available_bytes)} available"
        if host.ram_total_bytes
        else "unknown"
    )
    line(
        f"Host {host.hostname}: RAM {ram}; {host.cpu_logical_cores} logical / {host.cpu_physical_cores} physical cores"
    )
    launch = report.launch
    if launch.launcher == "none":
        line("Launcher: none (no SLURM or torchrun variables set): one node")
    else:
        facts = {
            k: v for k, v in launch.model_dump(exclude={"launcher", "variables", "warnings"}).items() if v is not None
        }
        line(f"Launcher: {launch.launcher}; " + ", ".join(f"{k}={v}" for k, v in facts.items()))
    for warning in launch.warnings:
        line(f"  warning: {warning}")

    if not report.cpu_only:
        try:
            cluster = report.to_cluster_spec()
        except UserInputError as error:
            line(f"Planning target: cannot build one from this machine ({error})")
        else:
            assert cluster is not None
            line(
                f"Planning target: {cluster.num_nodes} node(s) x {cluster.gpus_per_node} {cluster.gpu.name}, "
                f"intra-node {cluster.intra_node_bandwidth_GBps:g} GB/s/dir, "
                f"inter-node {cluster.inter_node_bandwidth_GBps:g} GB/s/dir per GPU ({cluster.inter_node_preset})"
            )


def register(app: typer.Typer) -> None:
    @app.command("gpus")
    def gpus_command(
        as_json: bool = typer.Option(False, "--json", help="Print the full catalog entries as JSON."),
    ) -> None:
        """List the GPU catalog: memory, bandwidth, dense TFLOPs, links, assumed price and sources."""
        from planner.hardware.gpus import load_gpu_catalog

        specs = load_gpu_catalog()
        if as_json:
            print(json.dumps([spec.model_dump(mode="json") for spec in specs], indent=2))
        else:
            _print_catalog(specs)

    @app.command("detect")
    def detect_command(
        as_json: bool = typer.Option(False, "--json", help="Print the detection report as JSON."),
    ) -> None:
        """Show this machine's GPUs (via NVML), their links, host RAM and the launcher's multi-node context."""
        from planner.hardware.detect import detect_hardware

        report = detect_hardware()
        if as_json:
            print(report.model_dump_json(indent=2))
        else:
            _print_detection(report)
