"""Draw predicted vs measured step time and measured throughput by strategy.

`.html` needs nothing beyond the standard library (inline SVG); `.png` uses
matplotlib when it is installed.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from planner.errors import UserInputError
from planner.files import check_writable, write_text_atomic

from .record_errors import RecordError

WIDTH, HEIGHT, MARGIN = 460, 360, 50
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


def best_throughput_by_strategy(errors: list[RecordError]) -> dict[str, float]:
    best: dict[str, float] = {}
    for error in errors:
        key = f"{error.record.strategy_label} x{error.record.gpu_count}"
        best[key] = max(best.get(key, 0.0), error.record.tokens_per_s or 0.0)
    return dict(sorted(best.items()))


def check_plot_target(path: str | Path) -> None:
    """Fail before any work when the plot cannot be written."""
    suffix = Path(path).suffix.lower()
    if suffix not in (".html", ".htm", ".png"):
        raise UserInputError(f"--plot {path}: use a .png or .html file name")
    try:
        check_writable(path)
    except UserInputError as error:
        raise UserInputError(f"--plot: {error}") from None
    if suffix == ".png":
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UserInputError(
                "--plot FILE.png needs matplotlib (pip install 'hardware-selector[plot]'); or use FILE.html"
            ) from None


def write_plot(errors: list[RecordError], path: str | Path) -> Path:
    target = Path(path)
    check_plot_target(target)
    if not errors:
        raise UserInputError("no successful records with predictions to plot; run run-training-benchmark --run first")
    if target.suffix.lower() == ".png":
        return _png(errors, target)
    return write_text_atomic(target, _html(errors))


def _scale(low: float, high: float, size: float, invert: bool):
    low, high = math.log10(low), math.log10(high)
    span = (high - low) or 1.0

    def project(value: float) -> float:
        share = (math.log10(value) - low) / span
        return MARGIN + (1 - share if invert else share) * (size - 2 * MARGIN)

    return project


def log_ticks(low: float, high: float) -> list[float]:
    """The step times an axis from `low` to `high` (seconds, log scale) is marked at: every power of ten inside,
    and 2 and 5 times each when fewer than three powers fall inside (a narrow range still gets marks to read)."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    for steps in ((1,), (1, 2, 5)):
        ticks = [float(f"{m}e{p}") for p in range(first, last + 1) for m in steps if low <= float(f"{m}e{p}") <= high]
        if len(ticks) >= 3:
            break
    return ticks


def _axes(low: float, high: float, x, y) -> list[str]:
    """Both axes, with a mark and its value at every tick (the same projections as the points)."""
    bottom, left = HEIGHT - MARGIN, MARGIN
    parts = [
        f'<line x1="{left}" y1="{bottom}" x2="{WIDTH - MARGIN}" y2="{bottom}" stroke="#444"/>',
        f'<line x1="{left}" y1="{MARGIN}" x2="{left}" y2="{bottom}" stroke="#444"/>',
    ]
    for tick in log_ticks(low, high):
        at_x, at_y = x(tick), y(tick)
        parts += [
            f'<line x1="{at_x:.1f}" y1="{bottom}" x2="{at_x:.1f}" y2="{bottom + 4}" stroke="#444"/>',
            f'<text class="tick-x" x="{at_x:.1f}" y="{bottom + 15}" font-size="10" text-anchor="middle">'
            f"{tick:g}</text>",
            f'<line x1="{left - 4}" y1="{at_y:.1f}" x2="{left}" y2="{at_y:.1f}" stroke="#444"/>',
            f'<text class="tick-y" x="{left - 6}" y="{at_y + 3:.1f}" font-size="10" text-anchor="end">{tick:g}</text>',
        ]
    return parts


def _scatter(errors: list[RecordError]) -> str:
    values = [v for e in errors for v in (e.predicted_s, e.calibrated_s, e.measured_s)]
    low, high = min(values) / 1.5, max(values) * 1.5
    x, y = _scale(low, high, WIDTH, False), _scale(low, high, HEIGHT, True)
    parts = [
        f'<svg width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        *_axes(low, high, x, y),
        f'<line x1="{x(low)}" y1="{y(low)}" x2="{x(high)}" y2="{y(high)}" stroke="#999" stroke-dasharray="4"/>',
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 10}" text-anchor="middle">measured step time (s, log)</text>',
        f'<text x="14" y="{HEIGHT / 2}" transform="rotate(-90 14 {HEIGHT / 2})" text-anchor="middle">'
        "predicted (grey) / calibrated (blue)</text>",
    ]
    for e in errors:
        label = html.escape(f"{e.record.id[:8]} {e.record.strategy_label} mb={e.record.micro_batch}")
        parts.append(
            f'<circle cx="{x(e.measured_s):.1f}" cy="{y(e.predicted_s):.1f}" r="4" fill="#bbb">'
            f"<title>{label}: predicted {e.predicted_s:.4g} s</title></circle>"
        )
        parts.append(
            f'<circle cx="{x(e.measured_s):.1f}" cy="{y(e.calibrated_s):.1f}" r="4" fill="{COLOURS[0]}">'
            f"<title>{label}: calibrated {e.calibrated_s:.4g} s, measured {e.measured_s:.4g} s</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _bars(errors: list[RecordError]) -> str:
    best = best_throughput_by_strategy(errors)
    top = max(best.values()) or 1.0
    bar = (HEIGHT - 2 * MARGIN) / max(1, len(best))
    parts = [
        f'<svg width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 10}" text-anchor="middle">best measured tokens/s</text>',
    ]
    for index, (name, value) in enumerate(best.items()):
        top_y = MARGIN + index * bar
        length = (WIDTH - 2 * MARGIN - 90) * value / top
        parts.append(
            f'<rect x="{MARGIN + 90}" y="{top_y:.1f}" width="{length:.1f}" height="{bar * 0.7:.1f}" '
            f'fill="{COLOURS[index % len(COLOURS)]}"/>'
        )
        parts.append(
            f'<text x="{MARGIN + 85}" y="{top_y + bar * 0.5:.1f}" text-anchor="end">{html.escape(name)}</text>'
        )
        parts.append(f'<text x="{MARGIN + 95 + length:.1f}" y="{top_y + bar * 0.5:.1f}">{value:,.0f}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _html(errors: list[RecordError]) -> str:
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>hardware-selector calibration</title></head>"
        f"<body><h2>Predicted vs measured ({len(errors)} records)</h2>{_scatter(errors)}"
        f"<h2>Throughput by strategy</h2>{_bars(errors)}</body></html>\n"
    )


def _png(errors: list[RecordError], target: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    measured = [e.measured_s for e in errors]
    left.loglog(measured, [e.predicted_s for e in errors], "o", color="#bbb", label="predicted")
    left.loglog(measured, [e.calibrated_s for e in errors], "o", label="calibrated")
    bounds = [min(measured + [e.predicted_s for e in errors]), max(measured + [e.predicted_s for e in errors])]
    left.plot(bounds, bounds, "--", color="#999")
    left.set_xlabel("measured step time (s)")
    left.set_ylabel("predicted step time (s)")
    left.legend()
    best = best_throughput_by_strategy(errors)
    right.barh(list(best), list(best.values()))
    right.set_xlabel("best measured tokens/s")
    figure.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.tmp.png")
    figure.savefig(temp)
    plt.close(figure)
    temp.replace(target)
    return target
