"""`estimate`: per-GPU memory of one training configuration, and whether it fits."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import typer

from planner.errors import UserInputError
from planner.limits import DEFAULT_HEADROOM
from planner.units import counted, format_bytes

from .given_flags import given_flags
from .model_options import ModelOptions, model_options
from .models import model_summary
from .option_groups import option_group
from .training_options import COMPRESSION_HELP, ClusterOptions, _choice, cluster_options, training_options_for_model

if TYPE_CHECKING:  # pydantic models: `--help` imports this module and builds none of them
    from planner.hardware.gpus import GpuSpec
    from planner.models.spec import ModelSpec
    from planner.training_config import TrainingConfig

LABELS = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "activations": "activations",
    "temporaries": "temporaries (logits, loss)",
    "buffers": "buffers (comm, gathered)",
    # Only on a device whose memory is the host's (the cpu pseudo-device), when the config offloads to the CPU.
    "host_offload": "offloaded to CPU (same RAM)",
    "overhead": "overhead (context, fragmentation)",
}


def memory_bar(used: int, capacity: int, width: int = 40) -> str:
    filled = min(width, round(width * used / capacity)) if capacity else width
    colour = "green" if used <= capacity else "red"
    return f"[{colour}]{'█' * filled}[/]{'░' * (width - filled)} {used / capacity:.0%} of {format_bytes(capacity)}"


def print_memory_table(result, title: str, host_ram: str = "") -> None:
    """host_ram: where the node's host RAM figure comes from (the cluster's assumption line), said beside it."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    memory = result.memory
    per_gpu = memory.per_gpu_bytes
    table = Table(title=title)
    table.add_column("per GPU")
    table.add_column("memory", justify="right")
    table.add_column("share", justify="right")
    table.add_column("source")
    for key, label in LABELS.items():
        if key not in per_gpu:
            continue
        share = per_gpu[key] / per_gpu["total"] if per_gpu["total"] else 0
        table.add_row(label, format_bytes(per_gpu[key]), f"{share:.0%}", memory.sources[key])
    table.add_row("[bold]total[/]", f"[bold]{format_bytes(per_gpu['total'])}[/]", "", f"peak at {memory.peak_phase}")
    console = Console()
    console.print(table)
    console.print(memory_bar(per_gpu["total"], memory.gpu_capacity_bytes))
    margin = memory.usable_bytes - per_gpu["total"]
    verdict = "[green]fits[/]" if margin >= 0 else "[red]does not fit[/]"
    side = "under" if margin >= 0 else "over"
    console.print(
        f"{verdict}: {format_bytes(abs(margin))} {side} the usable GPU memory, {format_bytes(memory.usable_bytes)} "
        f"({format_bytes(memory.gpu_capacity_bytes)} less {memory.headroom_fraction:.0%} headroom, --headroom)"
    )
    cpu_capacity = memory.cpu_capacity_per_node_bytes
    if cpu_capacity is not None and memory.cpu_per_node_bytes > cpu_capacity:
        over = memory.cpu_per_node_bytes - cpu_capacity
        console.print(f"[red]does not fit[/]: offload needs {format_bytes(over)} more CPU memory per node than it has")
    if memory.cpu_per_node_bytes:
        capacity = memory.cpu_capacity_per_node_bytes
        suffix = f" of {format_bytes(capacity)}" if capacity else ""
        suffix += f" ({escape(host_ram)})" if capacity and host_ram else ""
        if "host_offload" in per_gpu:  # the device's memory is this RAM: the table's total holds it already
            suffix += "; in the total above, since this device's memory is that RAM"
        console.print(f"CPU memory per node (offload): {format_bytes(memory.cpu_per_node_bytes)}{suffix}")
    if memory.nvme_per_node_bytes:
        nvme_capacity = memory.nvme_capacity_per_node_bytes
        if nvme_capacity is not None and memory.nvme_per_node_bytes > nvme_capacity:
            over = format_bytes(memory.nvme_per_node_bytes - nvme_capacity)
            console.print(f"[red]does not fit[/]: offload needs {over} more NVMe per node than --nvme-gb gives")
        suffix = f" of {format_bytes(nvme_capacity)}" if nvme_capacity is not None else " (no --nvme-gb: not checked)"
        console.print(f"NVMe per node (ZeRO-Infinity): {format_bytes(memory.nvme_per_node_bytes)}{suffix}")
    for note in memory.notes:
        console.print(f"  - {note}")


def print_speed(result) -> None:
    """The speed half of the estimate (step time, tokens/s, MFU, HFU) and its source; --json has it as "throughput"."""
    from planner.search.explain import throughput_source

    speed = result.throughput
    if speed is None:
        print(f"speed: not estimated: {result.throughput_error}")
        return
    print(
        f"speed: step {speed.step_time_s:.3g} s for {counted(speed.global_batch, 'sequence')}, "
        f"{speed.tokens_per_s:,.0f} tokens/s, "
        f"{speed.tflops_per_gpu:.3g} TFLOP/s per GPU, MFU {speed.mfu:.0%}, HFU {speed.hfu:.0%} [{throughput_source(speed)}]"
    )


def _fit_default_seq_len(ctx: typer.Context, config: TrainingConfig, spec: ModelSpec) -> TrainingConfig:
    """--seq-len not given: the smaller of 2048 and the model's context, as `plan` defaults."""
    from planner.search.request import default_seq_len

    if ctx.get_parameter_source("seq_len").name != "DEFAULT":
        return config
    return config.model_copy(update={"seq_len": default_seq_len(spec)})


def _fit_precision(ctx: typer.Context, config: TrainingConfig, gpu: GpuSpec) -> TrainingConfig:
    """--precision not given: the best the GPU has, as `plan` defaults; given, refused on a GPU without it, as
    `plan` refuses it (planner/search/request.training_precision holds the rule for both)."""
    from planner.search.request import training_precision

    requested = None if ctx.get_parameter_source("precision").name == "DEFAULT" else config.precision
    if requested is None and config.zeropp:
        requested = config.precision  # ZeRO++'s fp16-mixed (training_options), whatever the GPU's best
    return config.model_copy(update={"precision": training_precision(gpu, requested)})


IMPLEMENTATION_HELP = (
    "Whose training code to predict the speed of: ours (what --emit writes: transformers modules), "
    "megatron, megatron-core (with Transformer Engine: TP communication overlap, Hopper-native attention), "
    "megatron-deepspeed, megatron-deepspeed-2022 (the code MT-NLG and BLOOM ran, with the cost their runs measure: "
    "docs/accuracy.md), megatron-2019 (the September 2019 code of the ZeRO papers: unfused attention "
    "softmax), llm-foundry, deepspeed (ZeRO-3 as published in 2021), deepseek-dualpipe "
    "(DeepSeek-V3's overlapped all-to-all and two-ended pipeline), torchtitan (with --kernels compile for its "
    "--compile). The memory estimate takes what the stack decides of it (its cross-entropy kernel; torchtitan's "
    "FSDP stages kept gathered under --pp); its blocks are counted as transformers' modules."
)


def register(app: typer.Typer) -> None:
    @app.command("estimate")
    @option_group("model", model_options)
    @option_group("cluster", cluster_options)
    @option_group("config", training_options_for_model)
    def estimate_command(
        ctx: typer.Context,
        model: ModelOptions,
        cluster: ClusterOptions,
        config: Callable[[ModelSpec], TrainingConfig],
        headroom: float = typer.Option(
            DEFAULT_HEADROOM, "--headroom", help="Share of GPU memory kept free (plan's default too; 0 for none)."
        ),
        overhead_gb: float | None = typer.Option(
            None,
            "--overhead-gb",
            help="Runtime overhead per GPU in GiB (CUDA context + fragmentation); default 0.75 + 5%.",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        implementation: str = typer.Option("ours", "--implementation", help=IMPLEMENTATION_HELP),
        compression: str = typer.Option("none", "--compression", help=COMPRESSION_HELP),
    ) -> None:
        """Estimate per-GPU memory (and speed) of one training configuration."""
        from planner.memory.estimate import OverheadSettings
        from planner.search.compression import estimate_compressed
        from planner.search.request import CompressionRequest

        spec = model.resolve()
        # Built once the model is known (training_options_for_model): a dense model's --ep is said first.
        training = _fit_default_seq_len(ctx, config(spec), spec).with_stage_map(spec)  # uneven pp: the map it ran
        _check_options(spec, training, implementation, headroom, overhead_gb)
        compressing = _choice(compression, CompressionRequest, "--compression")
        if compressing is not CompressionRequest.NONE and implementation.strip().lower() != "ours":
            raise UserInputError(
                f"--compression {compression} plans our engine's compressed gradients, and --implementation "
                f"{implementation} predicts another codebase's speed: drop one of them"
            )
        overhead = OverheadSettings() if overhead_gb is None else OverheadSettings.fixed(overhead_gb)
        cluster.given = tuple(given_flags(ctx, cluster_options))  # without --gpu: this machine, as `plan` plans it
        target = cluster.target()
        training = _fit_precision(ctx, training, target.gpu)
        result, compression_notes = estimate_compressed(
            spec,
            training,
            target,
            compressing,
            headroom_fraction=headroom,
            overhead=overhead,
            implementation=implementation,
        )
        training = result.config
        if training.zeropp:
            from planner.throughput.zeropp import zeropp_lines

            compression_notes = [
                *compression_notes,
                *zeropp_lines(target.world_size, target.gpus_per_node, spec.params.total),
            ]
        positions_note = spec.beyond_trained_positions(training.seq_len)  # as plan's reasons say it
        if as_json:
            document = {
                "model": model_summary(spec),
                "cluster": result.cluster_summary,
                "config": training.model_dump(mode="json"),
                "memory": result.memory.model_dump(mode="json"),
                "throughput": result.throughput.model_dump(mode="json") if result.throughput else None,
            }
            if result.throughput_error:
                document["throughput_error"] = result.throughput_error
            if compression_notes:
                document["compression_notes"] = compression_notes
            if positions_note:
                document["notes"] = [positions_note]
            print(json.dumps(document, indent=2))
        else:
            host_ram = next((line for line in target.assumptions if line.startswith("host RAM")), "")
            # The precision says where it came from: the GPU's best (as plan chooses) or --precision.
            chosen = "the GPU's best" if ctx.get_parameter_source("precision").name == "DEFAULT" else "--precision"
            chosen = "ZeRO++'s" if training.zeropp and chosen == "the GPU's best" else chosen
            strategy = "deepspeed ZeRO++" if training.zeropp else training.strategy.value
            title = f"{spec.name} on {target.world_size} x {target.gpu.name}, {strategy}, {training.precision.value} ({chosen})"
            print_memory_table(result, title, host_ram)
            print_speed(result)
            for note in compression_notes:
                print(f"  - {note}")
            if positions_note:
                print(f"note: {positions_note}")
            from .plan_table import cluster_lines

            print("\n".join(cluster_lines(target)))  # last: its bullets are its own


def _check_options(spec, config, implementation: str, headroom: float, overhead_gb: float | None) -> None:
    """estimate's own options against each other, before any work: each conflict is one line (the configuration's
    flags were checked by training_options, and TrainingConfig itself). --implementation names a codebase that
    trains with some strategies only; --strategy engine --tp N on a family our engine does not split over tp, or
    ZeRO-3 beside --pp, is a run that cannot start (another --implementation, Megatron-LM's or torchtitan's, may
    run it)."""
    from planner.models.families import splits_over_tp
    from planner.throughput.implementation import check_implementation_runs
    from planner.training_config import Strategy

    if not 0.0 <= headroom < 1.0:
        raise UserInputError(f"--headroom is a share of GPU memory between 0 and 1, not {headroom}")
    if overhead_gb is not None and overhead_gb < 0:
        raise UserInputError(f"--overhead-gb must be 0 or more, not {overhead_gb}")
    check_implementation_runs(implementation, config.strategy)
    if config.pipeline_schedule.value.startswith("interleaved") and config.virtual_stages < 2:
        raise UserInputError(
            f"--pp-schedule {config.pipeline_schedule.value} interleaves 2 or more chunks per rank; add "
            "--virtual-stages 2 (or more), or use --pp-schedule 1f1b"
        )
    ours = implementation.strip().lower() == "ours"
    if (
        ours
        and config.strategy is Strategy.ENGINE
        and config.tensor_parallel > 1
        and not splits_over_tp(spec.model_type)
    ):
        raise UserInputError(
            f"--tp {config.tensor_parallel}: our engine does not split {spec.model_type} models over tp (it pipelines "
            "them); use --tp 1 with --pp, or --implementation megatron for Megatron-LM's split"
        )
    if ours and config.strategy is Strategy.ENGINE and config.zero_stage == 3 and config.pipeline_parallel > 1:
        # backends/engine/initialize.py refuses it at start-up; torchtitan's FSDP x PP runs it (--implementation).
        raise UserInputError(
            "ZeRO-3 does not compose with pipeline parallelism on our engine; use --zero-stage 1 or 2 with --pp, "
            "or name the codebase that runs it with --implementation"
        )
