"""What `plan` prints: the ranked table of plans with their reasons and sources, or the --json document."""

from __future__ import annotations

from planner.contract.choices import ActivationCheckpointing
from planner.throughput.to_train import to_train, tokens_source
from planner.units import format_bytes, format_dollars


def cluster_lines(cluster) -> list[str]:
    """What the cluster was taken to be, detected, given or assumed, each with its source (docs/hardware.md):
    `plan` and `estimate` print them under their figures (an audit found them only in --json and --report)."""
    return ["the cluster, as planned:", *(f"  - {line}" for line in cluster.assumptions)]


def search_document(result, tokens_from: str | None = None) -> dict:
    """The --json shape: best, candidates and rejected, each plan with its strategy family (`tokens_from`: where
    the token count of each plan's `to_train` came from)."""
    from planner.search.strategy_layout import family_label

    def dump(plan):  # with the layout placed on the cluster (dp filled), which plan.json derives
        return {
            "strategy": family_label(plan.config),
            **plan.model_dump(mode="json"),
            "layout": plan.layout.model_dump(mode="json"),
            "to_train": to_train(plan, result.train_tokens, tokens_from),
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
    ActivationCheckpointing.OP: "op",
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


# How the tokens/s column marks a figure that rests on the benchmark database, not on the formula alone.
EVIDENCE_MARKS = {"measured": "*", "calibration": "~"}
EVIDENCE_LEGEND = "tokens/s: * measured on this cluster (benchmark record), ~ calibrated by measured runs"


def _evidence_mark(speed) -> str:
    return EVIDENCE_MARKS.get(speed.sources.get("step_time_s", "").partition(":")[0], "")


def _time_or_cost(speed, tokens: float, world_size: int, by_time: bool) -> str:
    if speed is None:
        return "-"
    if by_time:
        return f"{speed.time_to_train_s(tokens) / 86400:,.1f}"
    cost = speed.cost_usd(tokens, world_size)
    return "-" if cost is None else format_dollars(cost)


def print_plans(result, title: str, explain: bool, tokens_from: str | None = "--tokens") -> None:
    """The ranked table and the best plan's reasons; `tokens_from` says where the token count of the time and
    cost columns came from (None: the default, 20 per parameter)."""
    from rich.console import Console
    from rich.table import Table

    from planner.search.request import Objective
    from planner.search.strategy_layout import family_label

    # No repr highlighting: it colours nothing here worth compiling its dozen regular expressions for in every
    # `plan` (docs/performance.md, "Planner speed").
    console = Console(highlight=False)
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
                _compact(speed.tokens_per_s) + _evidence_mark(speed) if speed else "-",
                f"{speed.mfu:.0%}" if speed else "-",
                _time_or_cost(speed, tokens, plan.cluster.world_size, by_time),
            )
        console.print(table)
        console.print(
            "AC: activation checkpointing (sel = selective); GPU mem: peak per GPU, share of the GPU",
            markup=False,
            highlight=False,
        )
        if any(plan.throughput and _evidence_mark(plan.throughput) for plan in result.candidates):
            console.print(f"{EVIDENCE_LEGEND}; unmarked: formula", markup=False, highlight=False)
        # Where the token count comes from: --tokens, or the default the help names (20 per parameter).
        tokens_note = tokens_source(tokens_from)
        if by_time:
            console.print(
                f"days: wall time to train {tokens:.3g} tokens ({tokens_note})", markup=False, highlight=False
            )
        else:
            console.print(
                f"cost: to train {tokens:.3g} tokens ({tokens_note}) at {result.best.cluster.gpu.price_note()} "
                "(--price)",
                markup=False,
                highlight=False,
            )
        shown = result.candidates if explain else result.candidates[:1]
        for index, plan in enumerate(shown, 1):
            console.print(f"[bold]#{index} {family_label(plan.config)}[/] because:")
            for reason in plan.reasons:
                console.print(f"  - {reason if explain else _without_source(reason)}", markup=False, highlight=False)
            if explain:
                memory = plan.memory
                figures = {**memory.per_gpu_bytes, "cpu_per_node": memory.cpu_per_node_bytes,
                           "nvme_per_node": memory.nvme_per_node_bytes}  # fmt: skip
                for category, source in memory.sources.items():
                    if category in figures and (category in memory.per_gpu_bytes or figures[category]):
                        console.print(
                            f"    {category}: {format_bytes(figures[category])} [{source}]",
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
    if result.best is not None:
        for line in cluster_lines(result.best.cluster):
            console.print(line, markup=False, highlight=False, style="dim")
    stats = result.stats
    console.print(
        f"searched {stats.considered:,} candidates ({stats.memory_evaluations:,} memory and "
        f"{stats.throughput_evaluations:,} throughput estimates, {stats.pruned:,} decided by monotonicity) "
        f"in {stats.elapsed_s * 1000:.0f} ms",
        style="dim",
    )
