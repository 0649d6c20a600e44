"""One self-contained HTML file per report: plotly's script inline, the charts, the tables, and the page's data.

No network: plotly.js is written into the page, and nothing is fetched when it opens. The data the page draws
is embedded as `<script type="application/json" id="report-data">` (the PlanReport or RunReport), so a reader
or a test can take the numbers from the page itself (docs/running.md, "Report"). The file is written
atomically (planner/files.py).
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from planner.errors import UserInputError
from planner.files import check_writable, write_text_atomic
from planner.report.figures import memory_figure, run_figures, step_time_figure, tune_figure
from planner.report.launches import launch_lines
from planner.report.plan_data import CandidateView, PlanReport, Source, TrainBudget
from planner.report.run_data import Comparison, RunReport
from planner.units import GIB, format_dollars

INSTALL_HINT = "pip install 'hardware-selector[report]'"
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1.5em; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
td.number { text-align: right; white-space: nowrap; }
.note { color: #666; font-size: 0.9em; }
"""
COMPARISON_NAMES = {
    "step_time_s": ("step time", "s", 1.0),
    "tokens_per_s": ("tokens/s", "", 1.0),
    "peak_memory_bytes": ("peak memory", "GiB", float(GIB)),
    "mfu": ("MFU", "", 1.0),
}


def require_plotly(what: str) -> None:
    """Fail in one line, before any work, when the report extra is missing."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise UserInputError(f"{what} draws with plotly, which is not installed; {INSTALL_HINT}") from None


def check_report_target(path: str | Path, what: str) -> Path:
    """An .html target that can be written, with plotly installed: checked before planning or reading anything."""
    target = Path(path).expanduser()
    if target.suffix.lower() not in (".html", ".htm"):
        raise UserInputError(f"{what} {path}: the report is an HTML page; name it FILE.html")
    if target.is_dir():
        raise UserInputError(f"{what} {path} is a folder; name the page's file, e.g. {target / 'report.html'}")
    require_plotly(what)
    try:
        check_writable(target)  # a folder that refuses it fails here, not after the search or the reading
    except UserInputError as error:
        raise UserInputError(f"{what}: {error}") from None
    return target


def _cell(value: Any, number: bool = False) -> str:
    return f'<td class="number">{html.escape(str(value))}</td>' if number else f"<td>{html.escape(str(value))}</td>"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(header)}</th>" for header in headers)
    body = "".join(f"<tr>{''.join(row)}</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure_html(figure: Any) -> str:
    return figure.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False, "responsive": True})


def _maybe(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _candidates_table(candidates: list[CandidateView]) -> str:
    # Days, GPU-hours and cost need a token budget: a run's page (report RUN_DIR) has none, and shows no such columns.
    budget = any(c.time_to_train_s is not None or c.cost_usd is not None for c in candidates)
    rows = []
    for candidate in candidates:
        layout = candidate.layout
        split = "×".join(str(layout[name]) for name in ("dp", "tp", "pp"))
        split += "".join(f"×{name}{layout[name]}" for name in ("cp", "ep") if layout[name] > 1)
        rows.append(
            [
                _cell(candidate.rank, True),
                _cell(candidate.strategy),
                _cell(split),
                _cell(f"{candidate.micro_batch}×{candidate.grad_accum}"),
                _cell(candidate.activation_checkpointing),
                _cell(f"{candidate.memory_total_bytes / GIB:.1f} of {candidate.usable_bytes / GIB:.1f}", True),
                _cell(_maybe(candidate.step_time_s, ".3g"), True),
                _cell(_maybe(candidate.tokens_per_s, ",.0f"), True),
                _cell(_maybe(candidate.mfu, ".0%"), True),
            ]
            + (
                [
                    _cell(_maybe(candidate.time_to_train_s and candidate.time_to_train_s / 86400, ".3g"), True),
                    _cell(_maybe(candidate.gpu_hours, ",.0f"), True),
                    _cell("-" if candidate.cost_usd is None else format_dollars(candidate.cost_usd), True),
                ]
                if budget
                else []
            )
        )
    headers = ["#", "strategy", "dp×tp×pp", "micro×accum", "AC", "GiB per GPU (of usable)", "step s", "tokens/s"]
    table = _table([*headers, "MFU", *(["days", "GPU-hours", "cost"] if budget else [])], rows)
    reasons = "".join(
        f"<details><summary>#{candidate.rank} {html.escape(candidate.strategy)}: why</summary><ul>"
        + "".join(f"<li>{html.escape(reason)}</li>" for reason in candidate.reasons)
        + "</ul></details>"
        for candidate in candidates
    )
    return table + reasons


def _sources_table(sources: list[Source], with_ranks: bool) -> str:
    rows = [
        [_cell(source.number), _cell(source.source)]
        + ([_cell(", ".join(f"#{rank}" for rank in source.ranks))] if with_ranks else [])
        for source in sources
    ]
    return _table(["number", "source", *(["candidates"] if with_ranks else [])], rows)


def _document(title: str, body: str, data: dict[str, Any]) -> str:
    from plotly.offline import get_plotlyjs

    # "</" cannot end the script early inside the JSON block; a diverged run's NaN or inf loss is JSON's null (json
    # writes NaN, which no strict parser reads back: a new user's audit).
    embedded = json.dumps(_finite(data), sort_keys=True, allow_nan=False).replace("</", "<\\/")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n"
        f'<script type="text/javascript">{get_plotlyjs()}</script>\n</head>\n<body>\n'
        f"<h1>{html.escape(title)}</h1>\n{body}\n"
        f'<script type="application/json" id="report-data">{embedded}</script>\n</body>\n</html>\n'
    )


def _budget_note(budget: TrainBudget | None) -> str:
    """Where the days, GPU-hours and cost columns come from: the formula, the token count's and the price's source."""
    if budget is None:
        return ""
    return (
        f'<p class="note">days, GPU-hours and cost: to train {budget.tokens:.3g} tokens '
        f"({html.escape(budget.tokens_source)}); days = tokens / tokens/s / 86,400; GPU-hours = that time in hours "
        f"x GPUs; cost = GPU-hours x the price: {html.escape(budget.price_source)}</p>"
    )


def plan_page(report: PlanReport) -> str:
    parts = [
        f'<p class="note">ranked by {html.escape(report.objective)}; #1 is the plan. '
        "Every number below is the planner's estimate; the sources table says where each comes from.</p>",
    ]
    if report.candidates:
        parts += [
            _figure_html(memory_figure(report.candidates)),
            _figure_html(step_time_figure(report.candidates)),
            "<h2>Ranked candidates</h2>",
            _budget_note(report.budget),
            _candidates_table(report.candidates),
        ]
    else:
        parts += ["<p><strong>Nothing fits.</strong> Why each family failed, and what would fit, are below.</p>"]
    parts += [
        "<h2>Why each strategy family lost</h2>",
        _table(["family", "fate"], [[_cell(family), _cell(fate)] for family, fate in report.rejected.items()]),
    ]
    if report.suggestions:
        parts += ["<h2>What would make it fit</h2><ul>"]
        parts += [f"<li>{html.escape(line)}</li>" for line in report.suggestions] + ["</ul>"]
    parts += ["<h2>Sources of the numbers</h2>", _sources_table(report.sources, with_ranks=True)]
    parts += [f"<p>throughput calibration: {html.escape(report.calibration or 'none')}</p>"]
    if report.cluster_assumptions:
        parts += ["<p>cluster assumptions:</p><ul>"]
        parts += [f"<li>{html.escape(line)}</li>" for line in report.cluster_assumptions] + ["</ul>"]
    return _document(report.title, "\n".join(parts), report.model_dump(mode="json"))


def _comparison_row(comparison: Comparison) -> list[str]:
    label, unit, scale = COMPARISON_NAMES[comparison.name]
    fmt = ".1%" if comparison.name == "mfu" else ".4g"

    def shown(value: float | None) -> str:
        return "-" if value is None else f"{format(value / scale, fmt)} {unit}".strip()

    ratio = "-"
    if comparison.measured is not None and comparison.predicted:
        ratio = f"{comparison.measured / comparison.predicted:.2f}x"
        if not comparison.comparable:
            ratio += " (not comparable: a CPU, --tiny or re-shaped run; see the summary)"
    return [
        _cell(label),
        _cell(shown(comparison.measured), True),
        _cell(comparison.measured_source),
        _cell(shown(comparison.predicted), True),
        _cell(comparison.predicted_source),
        _cell(ratio),
    ]


def run_page(report: RunReport) -> str:
    parts = [
        "<h2>Measured beside predicted</h2>",
        _table(
            ["figure", "measured", "measured from", "predicted", "predicted by", "measured / predicted"],
            [_comparison_row(comparison) for comparison in report.comparisons],
        ),
    ]
    if len(report.launches) > 1:  # resumed or relaunched: the table above is the whole run's, and says so
        parts += ["<p>launches (metrics.jsonl):</p><ul>"]
        parts += [f"<li>{html.escape(line)}</li>" for line in launch_lines(report.launches)] + ["</ul>"]
    if report.summary_lines:
        parts += ["<p>run_summary.json:</p><ul>"]
        parts += [f"<li>{html.escape(line)}</li>" for line in report.summary_lines] + ["</ul>"]
    parts += ["<h2>Over the run</h2>"] + [_figure_html(figure) for figure in run_figures(report)]
    parts += ["<h2>The plan</h2>", _figure_html(memory_figure([report.plan]))]
    if report.plan.step_time_parts_s:
        parts.append(_figure_html(step_time_figure([report.plan])))
    parts.append(_candidates_table([report.plan]))
    if report.tune is not None and report.tune.trials:
        parts += [f"<h2>Tune trials (winner: {html.escape(report.tune.winner or '-')})</h2>"]
        parts += [_figure_html(tune_figure(report.tune))]
        rows = [
            [
                _cell(trial.label),
                _cell(_maybe(trial.predicted_step_s, ".4g"), True),
                _cell(_maybe(trial.measured_step_s, ".4g"), True),
                _cell(_maybe(trial.tokens_per_s, ",.0f"), True),
                _cell(trial.status + (f": {trial.error}" if trial.error else "")),
            ]
            for trial in report.tune.trials
        ]
        parts.append(_table(["trial", "predicted s/step", "measured s/step", "tokens/s", "status"], rows))
    parts += ["<h2>Sources of the plan's numbers</h2>", _sources_table(report.sources, with_ranks=False)]
    return _document(report.title, "\n".join(parts), report.model_dump(mode="json"))


def write_page(path: str | Path, report: PlanReport | RunReport) -> Path:
    """Write the report's page to `path` atomically; returns the path."""
    page = plan_page(report) if isinstance(report, PlanReport) else run_page(report)
    return write_text_atomic(path, page)


def _finite(value: Any) -> Any:
    """`value` with every NaN and infinity replaced by None, through dicts and lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
