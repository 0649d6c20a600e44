"""`plan`: search every strategy for a model on a cluster and show the best that fit.

The search (planner/search) is pure Python; nothing on this path imports
torch, transformers or deepspeed, so planning a catalog model is instant.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from planner.errors import UserInputError
from planner.expert_routing import ExpertRouting
from planner.search.request import Objective
from planner.training_config import ActivationCheckpointing, KernelChoice, OptimizerKind, Precision
from planner.units import format_bytes

from .estimate import IMPLEMENTATION_HELP
from .model_options import ModelOptions, model_options
from .option_groups import option_group
from .run_options import RunOptionValues, run_option_values
from .serving import ServingOptions, print_serving, serving_options, serving_request
from .training_options import ClusterOptions, _choice, cluster_options, routing_options

ALL_STRATEGIES = "ddp,fsdp,deepspeed,engine"  # zero1, zero2, zero3: DeepSpeed at that stage only


def _listed(value: str, enum_type, flag: str) -> tuple:
    items = [part.strip() for part in value.split(",") if part.strip()]
    return tuple(dict.fromkeys(_choice(item, enum_type, flag) for item in items))


def search_document(result) -> dict:
    """The --json shape: best, candidates and rejected, each plan with its strategy family."""
    from planner.search.layouts import family_label

    def dump(plan):  # with the layout placed on the cluster (dp filled), which plan.json derives
        return {
            "strategy": family_label(plan.config),
            **plan.model_dump(mode="json"),
            "layout": plan.layout.model_dump(mode="json"),
        }

    return {
        "best": dump(result.best) if result.best else None,
        "candidates": [dump(plan) for plan in result.candidates],
        "rejected": result.rejected,
        "suggestions": result.suggestions,
        "objective": result.objective.value,
        "train_tokens": result.train_tokens,
        "stats": result.stats.model_dump(mode="json"),
    }


def _memory_cell(used: int, capacity: int) -> str:
    return f"{used / 2**30:.1f}G {used / capacity:.0%}" if capacity else f"{used / 2**30:.1f}G"


# Short names keep the table inside 80 columns; the legend under it spells them out.
AC_SHORT = {
    ActivationCheckpointing.NONE: "-",
    ActivationCheckpointing.SELECTIVE: "sel",
    ActivationCheckpointing.FULL: "full",
}


def _compact(value: float, prefix: str = "") -> str:
    for limit, unit, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if value >= limit:
            return f"{prefix}{value / unit:.3g}{suffix}"
    return f"{prefix}{value:,.0f}"


def _without_source(line: str) -> str:
    """The line without its trailing "[source]"; the sources are printed once below (all with --explain)."""
    return line[: line.rfind(" [")] if line.endswith("]") and " [" in line else line


def _time_or_cost(speed, tokens: float, world_size: int, by_time: bool) -> str:
    if speed is None:
        return "-"
    if by_time:
        return f"{speed.time_to_train_s(tokens) / 86400:,.1f}"
    return _compact(speed.cost_usd(tokens, world_size), "$")


def print_plans(result, title: str, explain: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from planner.search.layouts import family_label

    console = Console()
    if result.best is None:
        console.print(f"[red]nothing fits[/] {title}")
        for line in result.suggestions:
            console.print(f"  - {line}", markup=False, highlight=False)
    else:
        from rich import box

        # Fits 80 columns: no vertical rules, compact numbers, and only the strategy name may wrap.
        table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0), collapse_padding=True)
        table.add_column("#", no_wrap=True)
        table.add_column("strategy", min_width=13)
        # A fourth degree only when a candidate splits its sequences (cp) or its experts (ep).
        extra = next((name for name in ("cp", "ep") if any(getattr(p.layout, name) > 1 for p in result.candidates)), "")
        for column in (f"dp×tp×pp{'×' + extra if extra else ''}", "micro×acc", "AC"):
            table.add_column(column, no_wrap=True)
        by_time = result.objective is Objective.TIME_TO_TRAIN
        for column in ("GPU mem", "tokens/s", "MFU", "days" if by_time else "cost"):
            table.add_column(column, justify="right", no_wrap=True)
        tokens = result.train_tokens
        for index, plan in enumerate(result.candidates, 1):
            layout, config, speed = plan.layout, plan.config, plan.throughput
            table.add_row(
                str(index),
                family_label(config),
                f"{layout.dp}×{layout.tp}×{layout.pp}" + (f"×{getattr(layout, extra)}" if extra else ""),
                f"{config.micro_batch}×{config.grad_accum}",
                AC_SHORT[config.activation_checkpointing],
                _memory_cell(plan.memory.total, plan.memory.gpu_capacity_bytes),
                _compact(speed.tokens_per_s) if speed else "-",
                f"{speed.mfu:.0%}" if speed else "-",
                _time_or_cost(speed, tokens, plan.cluster.world_size, by_time),
            )
        console.print(table)
        console.print(
            "AC: activation checkpointing (sel = selective); GPU mem: peak per GPU, share of the GPU",
            markup=False,
            highlight=False,
        )
        if by_time:
            console.print(f"days: wall time to train {tokens:.3g} tokens (--tokens)", markup=False, highlight=False)
        else:
            console.print(
                f"cost: to train {tokens:.3g} tokens at ${result.best.cluster.gpu.price_usd_per_hour:.2f}/GPU-hour [{result.best.cluster.gpu.price_source}] (--price, --tokens)",
                markup=False,
                highlight=False,
            )
        shown = result.candidates if explain else result.candidates[:1]
        for index, plan in enumerate(shown, 1):
            console.print(f"[bold]#{index} {family_label(plan.config)}[/] because:")
            for reason in plan.reasons:
                console.print(f"  - {reason if explain else _without_source(reason)}", markup=False, highlight=False)
            if explain:
                for category, source in plan.memory.sources.items():
                    console.print(
                        f"    {category}: {format_bytes(plan.memory.per_gpu_bytes[category])} [{source}]",
                        markup=False,
                        highlight=False,
                    )
    if result.rejected:
        console.print("[bold]other strategies:[/]")
        for family, fate in result.rejected.items():
            console.print(f"  - {family}: {fate if explain else _without_source(fate)}", markup=False, highlight=False)
    if result.best is not None and not explain:
        sources = [reason[reason.rfind(" [") + 2 : -1] for reason in result.best.reasons[:2] if reason.endswith("]")]
        for source in sources:
            console.print(f"source of {source}", markup=False, highlight=False, style="dim")
    stats = result.stats
    console.print(
        f"searched {stats.considered:,} candidates ({stats.memory_evaluations:,} memory and "
        f"{stats.throughput_evaluations:,} throughput estimates, {stats.pruned:,} decided by monotonicity) "
        f"in {stats.elapsed_s * 1000:.0f} ms",
        style="dim",
    )


def _target_cluster(cluster: ClusterOptions):
    """The named cluster, or without --gpu the GPUs of this machine (NVML), if any."""
    if cluster.gpu:
        return cluster.resolve()
    from planner.hardware.detect import detect_hardware

    detected = detect_hardware().to_cluster_spec(
        interconnect=cluster.interconnect, price_per_hour=cluster.price_per_hour
    )
    if detected is None:
        raise UserInputError("no GPU detected here; name the target GPU with --gpu (e.g. --gpu H100-80GB)")
    return detected


def register(app: typer.Typer) -> None:
    @app.command("plan")
    @option_group("model", model_options)
    @option_group("cluster", cluster_options)
    @option_group("run", run_option_values)
    @option_group("serving", serving_options)
    @option_group("routing", routing_options)
    def plan_command(
        model: ModelOptions,
        cluster: ClusterOptions,
        run: RunOptionValues,
        serving: ServingOptions,
        routing: ExpertRouting,
        global_batch: int | None = typer.Option(
            None, "--global-batch", help="Sequences per optimizer step (micro × accum × dp)."
        ),
        micro_batch: int | None = typer.Option(
            None, "--micro-batch", help="Sequences per GPU per micro-step (default: searched)."
        ),
        seq_len: int | None = typer.Option(
            None, "--seq-len", help="Tokens per sequence (default: the smaller of 2048 and the model's context)."
        ),
        precision: str | None = typer.Option(
            None, "--precision", help="fp32|fp16-mixed|bf16-mixed|bf16 (default: best the GPU has)."
        ),
        optimizer: str = typer.Option("adamw", "--optimizer", help="adamw|adamw-8bit|adafactor|sgd|lion"),
        ac: str = typer.Option("none,selective,full", "--ac", help="Activation checkpointing modes to consider."),
        strategies: str = typer.Option(
            ALL_STRATEGIES,
            "--strategies",
            help="Strategy kinds to consider: ddp,fsdp,deepspeed,engine; zero1|zero2|zero3 for DeepSpeed at that stage.",
        ),
        no_offload: bool = typer.Option(False, "--no-offload", help="Leave out CPU/NVMe offload."),
        implementation: str = typer.Option("ours", "--implementation", help=IMPLEMENTATION_HELP),
        lora_rank: int = typer.Option(
            0, "--lora-rank", help="Train LoRA adapters of this rank (0 = full fine-tuning)."
        ),
        qlora: bool = typer.Option(False, "--qlora", help="LoRA on a 4-bit NF4 base."),
        fp8: bool = typer.Option(False, "--fp8", help="FP8 block matmuls (planned only; needs an FP8 GPU)."),
        kernels: str = typer.Option(
            "eager", "--kernels", help="eager|compile|liger: the blocks' element-wise kernels."
        ),
        objective: str = typer.Option(
            "throughput", "--objective", help="throughput|cost|time-to-train (inference: throughput|latency)"
        ),
        top: int = typer.Option(5, "--top", help="How many plans to show (best of each strategy family)."),
        headroom: float = typer.Option(0.1, "--headroom", help="Share of GPU memory kept free."),
        tokens: float | None = typer.Option(
            None, "--tokens", help="Training tokens for cost and time (default: 20 per parameter)."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        explain: bool = typer.Option(False, "--explain", help="Reasons and memory sources for every plan shown."),
        emit: Path | None = typer.Option(None, "--emit", help="Write the best plan's run folder here."),
        force: bool = typer.Option(
            False,
            "--force",
            help="With --emit: overwrite an existing folder (a trained run's "
            "state is moved to previous/<time>/, never deleted or resumed).",
        ),
        db: Path | None = typer.Option(
            None, "--db", help="Benchmark database to calibrate with (default: $HARDWARE_SELECTOR_DB or the cache dir)."
        ),
        no_calibration: bool = typer.Option(
            False, "--no-calibration", help="Ignore benchmark records: analytical estimates only."
        ),
    ) -> None:
        """Find the fastest (or cheapest) way to train a model on a cluster, and explain it."""
        if serving.inference:
            training_only = {
                "--global-batch": global_batch is not None,
                "--micro-batch": micro_batch is not None,
                "--seq-len": seq_len is not None,
                "--precision": precision is not None,
                "--ac": ac != "none,selective,full",
                "--strategies": strategies != ALL_STRATEGIES,
                "--no-offload": no_offload,
                "--lora-rank": bool(lora_rank),
                "--qlora": qlora,
                "--fp8": fp8,
                "--kernels": kernels != "eager",
                "--expert-capacity/--expert-imbalance": not routing.is_default,
                "--tokens": tokens is not None,
                "--emit": emit is not None,
            }
            given = [flag for flag, set_ in training_only.items() if set_] + run.given()
            if given:
                raise UserInputError(f"{', '.join(given)} plan training, not serving; drop them or --mode inference")
            if not 0 <= headroom < 1:
                raise UserInputError(f"--headroom must be in [0, 1), not {headroom}")
            from planner.inference import plan_serving

            spec = model.resolve()
            target = _target_cluster(cluster)
            request = serving_request(serving, objective, top, headroom, spec)
            title = (
                f"serving {spec.name} on {target.world_size} x {target.gpu.name}: {request.batch} x "
                f"{request.context}+{request.output} tokens, {request.weights.value} weights"
            )
            print_serving(plan_serving(spec, target, request), title, as_json, explain)
            return
        from planner.search import Objective, PlanRequest, StrategyKind, require_best, search_plans
        from planner.selector.training import default_seq_len

        if emit is None and run.given():
            raise UserInputError(f"{', '.join(run.given())} describe the run of an emitted folder; add --emit DIR")
        run_options = run.to_run_options() if emit is not None else None
        if not 0 <= headroom < 1:
            raise UserInputError(f"--headroom must be in [0, 1), not {headroom}")
        from planner.limits import MAX_BATCH, MAX_SEQ_LEN, MAX_TOKENS, check_count, check_number

        for flag, value, high in (
            ("--top", top, 1000),
            ("--seq-len", seq_len, MAX_SEQ_LEN),
            ("--global-batch", global_batch, MAX_BATCH),
            ("--micro-batch", micro_batch, MAX_BATCH),
        ):
            if value is not None:
                check_count(flag, value, high=high)
        if tokens is not None:
            check_number("--tokens", tokens, high=MAX_TOKENS, low=0.0, low_inclusive=False)
        from planner.throughput.implementation import implementation_named

        implementation_named(implementation)  # a wrong name: one line before any work
        if emit is not None and implementation.strip().lower() != "ours":
            raise UserInputError(
                f"--implementation {implementation} predicts another codebase's speed, and --emit writes configs "
                "for our stacks: drop one of them"
            )
        spec = model.resolve()
        seq_len = seq_len or default_seq_len(spec)
        request = PlanRequest(
            seq_len=seq_len,
            global_batch=global_batch,
            micro_batch=micro_batch,
            precision=_choice(precision, Precision, "--precision") if precision else None,
            optimizer=_choice(optimizer, OptimizerKind, "--optimizer"),
            activation_checkpointing=_listed(ac, ActivationCheckpointing, "--ac"),
            strategies=_listed(strategies, StrategyKind, "--strategies"),
            implementation=implementation.strip().lower(),
            allow_offload=not no_offload,
            lora_rank=lora_rank,
            qlora=qlora,
            fp8=fp8,
            kernels=_choice(kernels, KernelChoice, "--kernels"),
            routing=routing,
            objective=_choice(objective, Objective, "--objective"),
            top_k=top,
            headroom_fraction=headroom,
            train_tokens=tokens,
        )
        target = _target_cluster(cluster)
        if no_calibration:
            adjust, calibration = None, "not calibrated (--no-calibration)"
        else:
            from benchmarks_db.calibrate import plan_calibration

            adjust, calibration = plan_calibration(spec, target, db)
        result = search_plans(spec, target, request, adjust, calibration=calibration)
        if emit is not None:
            try:
                from planner.rundir.write import emit_run_folder
            except ImportError:
                raise UserInputError(
                    "--emit needs the run-folder emitters (planner/emit), missing from this install"
                ) from None

            from planner.rundir.previous_run import previous_run_state

            best = require_best(result, f"{spec.name} on {target.world_size} x {target.gpu.name}")
            folder = emit.expanduser().resolve()
            previous = previous_run_state(folder) if force and folder.is_dir() else []
            written = emit_run_folder(best, emit, force=force, options=run_options)
        if as_json:
            print(json.dumps(search_document(result), indent=2))
        else:
            print_plans(result, f"{spec.name} on {target.world_size} x {target.gpu.name}, seq {seq_len}", explain)
            from rich.console import Console

            Console().print(f"throughput {calibration}", markup=False, highlight=False, style="dim")
        if emit is not None:
            import sys

            stream = sys.stderr if as_json else sys.stdout
            if previous:
                kept = sorted((folder / "previous").iterdir())[-1]
                print(f"moved the previous run's {', '.join(previous)} to {kept} (kept, not resumed)", file=stream)
            print(f"wrote {len(written)} files to {emit}", file=stream)
