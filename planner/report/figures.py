"""The report page's charts, drawn with plotly from the page's data (plan_data.py, run_data.py).

Each function takes the page's data models and returns a plotly Figure; nothing here computes a figure the
data does not hold. plotly is the optional `report` extra: page.py checks for it before any work is done.
"""

from __future__ import annotations

from typing import Any

from planner.report.plan_data import STEP_PARTS, CandidateView
from planner.report.run_data import Curve, RunReport, TuneView
from planner.units import GIB

# One colour per memory component and per step-time part, the same on every page.
MEMORY_COLOURS = {
    "parameters": "#1f77b4",
    "gradients": "#ff7f0e",
    "optimizer_states": "#2ca02c",
    "activations": "#d62728",
    "temporaries": "#9467bd",
    "buffers": "#8c564b",
    "host_offload": "#bcbd22",  # offloaded states of the cpu device, in its own RAM
    "overhead": "#7f7f7f",
}
STEP_COLOURS = {
    "compute_s": "#1f77b4",
    "recompute_s": "#aec7e8",
    "exposed_comm_s": "#ff7f0e",
    "pipeline_bubble_s": "#d62728",
    "offload_s": "#9467bd",
    "optimizer_step_s": "#2ca02c",
    "measured_shortfall_s": "#7f7f7f",
}


def _figure(title: str, x_title: str, y_title: str, **layout: Any) -> Any:
    import plotly.graph_objects as go

    figure = go.Figure()
    figure.update_layout(
        title=title,
        template="plotly_white",
        height=420,
        margin={"l": 60, "r": 20, "t": 60, "b": 60},
        xaxis_title=x_title,
        yaxis_title=y_title,
        legend={"orientation": "h", "y": -0.25},
        **layout,
    )
    return figure


def _label(candidate: CandidateView) -> str:
    return f"#{candidate.rank} {candidate.strategy}"


def memory_figure(candidates: list[CandidateView]) -> Any:
    """Each candidate's per-GPU memory at the step's peak, stacked by component, with usable memory as a line."""
    import plotly.graph_objects as go

    figure = _figure("Memory per GPU at the step's peak", "candidate", "GiB", barmode="stack")
    labels = [_label(candidate) for candidate in candidates]
    for name, colour in MEMORY_COLOURS.items():
        values = [candidate.memory_bytes.get(name, 0) / GIB for candidate in candidates]
        if any(values):
            figure.add_trace(go.Bar(x=labels, y=values, name=name.replace("_", " "), marker_color=colour))
    figure.add_trace(
        go.Scatter(
            x=labels,
            y=[candidate.usable_bytes / GIB for candidate in candidates],
            name="usable (GPU memory less headroom)",
            mode="lines+markers",
            line={"color": "black", "dash": "dash"},
        )
    )
    return figure


def step_time_figure(candidates: list[CandidateView]) -> Any:
    """Each candidate's step time, stacked by what it is spent on (StepTimeBreakdown's parts)."""
    import plotly.graph_objects as go

    figure = _figure("Step time by what it is spent on", "candidate", "seconds per optimizer step", barmode="stack")
    estimated = [candidate for candidate in candidates if candidate.step_time_parts_s]
    labels = [_label(candidate) for candidate in estimated]
    for name, label in STEP_PARTS.items():
        values = [candidate.step_time_parts_s.get(name, 0.0) for candidate in estimated]
        if any(values):
            figure.add_trace(go.Bar(x=labels, y=values, name=label, marker_color=STEP_COLOURS[name]))
    return figure


def _line(figure: Any, curve: Curve, name: str, scale: float = 1.0, **style: Any) -> None:
    import plotly.graph_objects as go

    style = {"mode": "lines", **style}
    figure.add_trace(go.Scatter(x=curve.steps, y=[value / scale for value in curve.values], name=name, **style))


def _prediction(figure: Any, value: float | None, label: str, scale: float = 1.0) -> None:
    if value is not None:
        figure.add_hline(
            y=value / scale, line_dash="dash", line_color="black", annotation_text=label, annotation_position="top left"
        )


def run_figures(report: RunReport) -> list[Any]:
    """Loss and eval loss, tokens/s, MFU and memory over the steps, each with the plan's prediction as a line."""
    curves = report.curves
    predicted = {comparison.name: comparison.predicted for comparison in report.comparisons}
    figures = []
    if "loss" in curves or "eval_loss" in curves:
        figure = _figure("Loss", "step", "loss")
        if "loss" in curves:
            _line(figure, curves["loss"], "train loss")
        if "eval_loss" in curves:
            _line(figure, curves["eval_loss"], "eval loss", mode="lines+markers")
        figures.append(figure)
    for name, title, unit, scale in (
        ("tokens_per_s", "Throughput", "tokens/s", 1.0),
        ("mfu", "Model FLOPs utilisation", "MFU", 1.0),
        ("peak_memory_bytes", "Peak memory of rank 0", "GiB", float(GIB)),
    ):
        if name not in curves:
            continue
        figure = _figure(title, "step", unit)
        _line(figure, curves[name], "measured", scale)
        _prediction(figure, predicted.get(name), "predicted by the plan", scale)
        if name == "peak_memory_bytes":
            _prediction(figure, report.plan.usable_bytes, "usable (GPU memory less headroom)", scale)
        figures.append(figure)
    for figure in figures:  # where a resume (or another --nproc) began: the curves run on across it
        for launch in report.launches[1:]:
            figure.add_vline(
                x=launch.resumed_at,
                line_dash="dot",
                line_color="grey",
                annotation_text=f"resumed at step {launch.resumed_at}",
            )
    return figures


def tune_figure(tune: TuneView) -> Any:
    """Each trial's predicted and measured step time, side by side."""
    import plotly.graph_objects as go

    figure = _figure("Tune trials: step time", "trial", "seconds per step", barmode="group")
    labels = [trial.label for trial in tune.trials]
    figure.add_trace(go.Bar(x=labels, y=[trial.predicted_step_s for trial in tune.trials], name="predicted"))
    figure.add_trace(go.Bar(x=labels, y=[trial.measured_step_s for trial in tune.trials], name="measured"))
    return figure
