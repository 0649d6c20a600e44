"""What `plan --objective cost --clouds ...` prints: each cloud's two cheapest options, the winner worked out,
and where every number came from (price: source and date; speed: the planner's estimate), or the --json document."""

from __future__ import annotations

import math

from planner.units import format_dollars


def _days(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "never"
    days = seconds / 86400
    return f"{days:,.0f}" if days >= 10 else f"{days:.2g}"


def _dollars(value: float) -> str:
    return format_dollars(value) if math.isfinite(value) else "-"


def _compact(value: float) -> str:
    for limit, unit, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if value >= limit:
            return f"{value / unit:.3g}{suffix}"
    return f"{value:,.0f}"


def _json_safe(value):
    """JSON has no infinity: a spot run that never finishes has null for its time and cost."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value


def cost_document(result, calibrations: dict[str, str], fabrics: dict[str, str], best_calibration: str) -> dict:
    """The --json shape: the ranked result, with the throughput's calibration and the assumed fabric per GPU, and
    the calibration of the best option's own plan (the records a GPU's line counts may be of another count)."""
    return _json_safe(
        {
            **result.model_dump(mode="json"),
            "throughput_calibration": calibrations,
            "best_calibration": best_calibration,
            "assumed_fabric": fabrics,
        }
    )


def _rows(result) -> list:
    shown = [option for options in result.per_cloud.values() for option in options]
    return sorted(shown, key=lambda option: (option.cost_usd, option.time_s, option.cloud))


def print_cost(result, best, title: str, best_calibration: str, fabrics: dict[str, str]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()

    def say(line: str = "", **style) -> None:
        console.print(line, markup=False, highlight=False, **style)

    kind = "spot" if result.spot else "on-demand"
    table = Table(
        title=f"{title}: {result.tokens:.3g} tokens within {result.deadline_s / 86400:g} days, {kind}",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("")
    table.add_column("cloud, region", no_wrap=True)
    for column in ("GPU", "GPUs", "$/GPU-h", "tokens/s", "days", "cost"):
        table.add_column(column, no_wrap=True, justify="left" if column == "GPU" else "right")
    for option in _rows(result):
        mark = "*" if option == best else ""
        table.add_row(
            mark,
            f"{option.cloud}, {option.region}",
            option.gpu,
            str(option.gpus),
            f"{option.price_usd_per_gpu_hour:.2f}" + ("!" if option.stale else ""),
            _compact(option.tokens_per_s),
            _days(option.time_s),
            _dollars(option.cost_usd),
        )
    console.print(table)
    say(
        "each cloud's two cheapest options that meet the deadline (* the cheapest of all); tokens/s: the planner's "
        "estimate of the fastest plan at that count; days: tokens / tokens/s"
        + (" with expected preemptions" if result.spot else "")
        + "; cost: that time in hours x GPUs x $/GPU-h (price sources below)"
        + ("; ! a stale price" if any(option.stale for option in _rows(result)) else "")
    )
    hours = best.time_s / 3600
    say(
        f"best: {best.gpus} x {best.gpu} ({best.nodes} node(s) of {best.gpus_per_node}) on {best.cloud} "
        f"{best.region}, {best.strategy}: {_dollars(best.cost_usd)} in {_days(best.time_s)} days"
    )
    say(
        f"  = {result.tokens:.3g} tokens / {best.tokens_per_s:,.0f} tokens/s"
        + (f", stretched by preemptions to {hours:,.1f} h" if best.preemption else f" = {hours:,.1f} h")
        + f" x {best.gpus} GPUs x ${best.price_usd_per_gpu_hour:.4g}/GPU-hour"
    )
    say(
        f"  tokens/s: the planner's estimate of its fastest plan at {best.gpus} GPUs (strategy search, "
        f"{best_calibration or 'not calibrated'})"
    )
    if best.nodes > 1 and best.gpu in fabrics:
        say(f"  planned on {fabrics[best.gpu]}: a cloud whose nodes are not networked so is slower than this")
    if best.preemption is not None:
        say(f"  {best.preemption.describe()}")
    say("price sources:")
    seen = set()
    for option in _rows(result):
        key = (option.cloud, option.region, option.gpu)
        if key not in seen:
            seen.add(key)
            say(
                f"  {option.cloud} {option.region} {option.gpu}: ${option.price_usd_per_gpu_hour:.4g} [{option.price_source}]"
            )
    stale = sorted({f"{o.cloud} {o.gpu}" for o in result.considered if o.stale})
    if stale:
        say(f"stale prices (over 180 days old; check the source before trusting them): {', '.join(stale)}")
    missing = [cloud for cloud in sorted({o.cloud for o in result.considered}) if cloud not in result.per_cloud]
    for cloud in missing:
        fastest = min((o for o in result.considered if o.cloud == cloud), key=lambda o: o.time_s)
        say(
            f"{cloud}: nothing meets the deadline (fastest: {fastest.gpus} x {fastest.gpu}, {_days(fastest.time_s)} days)"
        )
    if result.one_instance:
        say(
            "planned and priced as one instance (smaller than an 8-GPU server; the catalog records no network "
            f"between such instances): {', '.join(result.one_instance)}",
            style="dim",
        )
    for line in result.skipped:
        say(f"not considered: {line}", style="dim")
