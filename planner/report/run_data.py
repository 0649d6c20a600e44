"""The numbers a run's report page shows: its metrics over time, the plan's prediction beside the measurement,
and the tune trials that chose the plan.

Inputs are what the run folder holds (docs/running.md, "Report"): plan.json (the Plan, its RunConfig and, after
`tune`, a "tune" block), the rows of metrics.jsonl (backends/runner/metrics.py writes them; the caller reads
them) and run_summary.json when the run finished. Each measured figure names the file and the rule it comes
from; each predicted one the plan's own source.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from planner.contract.run_config import RunConfig
from planner.plan import Plan
from planner.report.launches import Launch, launches, run_peak, steady_median
from planner.report.plan_data import CandidateView, PageData, candidate_view, plan_sources

# metrics.jsonl fields drawn over the steps: train rows, then the eval row's loss.
TRAIN_CURVES = ("loss", "tokens_per_s", "mfu", "peak_memory_bytes", "step_s")
EVAL_CURVES = ("eval_loss",)


class Curve(BaseModel):
    model_config = ConfigDict(frozen=True)

    steps: list[int]
    values: list[float]


class Comparison(BaseModel):
    """One figure measured beside the plan's prediction of it."""

    model_config = ConfigDict(frozen=True)

    name: str  # step_time_s, tokens_per_s, peak_memory_bytes, mfu
    measured: float | None
    measured_source: str
    predicted: float | None
    predicted_source: str
    comparable: bool  # False: a --tiny run, another layout than the plan's, or a GPU figure on CPU processes


class TrialView(BaseModel):
    """One tune trial as plan.json's "tune" block records it (benchmarks/harness/tune.py, Trial)."""

    model_config = ConfigDict(frozen=True)

    label: str
    predicted_rank: int | None = None
    predicted_step_s: float | None = None
    measured_step_s: float | None = None
    tokens_per_s: float | None = None
    peak_memory_bytes: int | None = None
    status: str = ""
    error: str | None = None


class TuneView(BaseModel):
    model_config = ConfigDict(frozen=True)

    winner: str | None
    trials: list[TrialView]


class RunReport(PageData):
    kind: Literal["run"] = "run"
    plan: CandidateView  # the run's plan, drawn as the plan page draws a candidate
    curves: dict[str, Curve]  # TRAIN_CURVES and EVAL_CURVES that the run logged
    comparisons: list[Comparison]
    summary_lines: list[str]  # run_summary.json's own sentences (its launch's, when the run had several)
    launches: list[Launch]  # from metrics.jsonl; run_summary.json describes the last one only
    tune: TuneView | None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def curves(rows: list[dict[str, Any]]) -> dict[str, Curve]:
    """Each logged field's (step, value) pairs, in file order; fields the run never logged are left out."""
    found: dict[str, Curve] = {}
    for kind, fields in (("train", TRAIN_CURVES), ("eval", EVAL_CURVES)):
        kept = [row for row in rows if row.get("kind") == kind and _number(row.get("step")) is not None]
        for field in fields:
            pairs = [(int(row["step"]), value) for row in kept if (value := _number(row.get(field))) is not None]
            if pairs:
                found[field] = Curve(steps=[step for step, _ in pairs], values=[value for _, value in pairs])
    return found


def comparisons(
    plan: Plan, run: RunConfig, rows: list[dict[str, Any]], summary: dict[str, Any] | None
) -> list[Comparison]:
    """Step time, tokens/s, peak memory and MFU: measured beside predicted. The measured figures are
    run_summary.json's when the run had one launch; after a resume or an --nproc change they are the whole run's
    from metrics.jsonl (the summary holds the last launch's), peak memory the larger of the two. A run with a launch
    on another process count than the plan's (an elastic re-plan) is not comparable with the plan's prediction."""
    predicted = run.predicted
    speed = plan.throughput
    comparable = bool(summary.get("comparable_to_prediction")) if summary else run.device == "cuda"
    memory_kind = str(summary.get("memory_kind", "")) if summary else ""
    # Step time and tokens/s: also on CPU processes of a plan made for them (`--gpu cpu`), as the summary says.
    cpu_plan = run.device == "cpu" and plan.cluster.gpu.kind == "cpu"
    step_comparable = bool(summary.get("step_time_comparable", comparable)) if summary else comparable or cpu_plan
    found = launches(rows)
    several = len(found) > 1
    if any(launch.world_size not in (None, plan.cluster.world_size) for launch in found):
        # A launch on another count (an elastic re-plan, --nproc) ran another layout than the plan predicts.
        comparable = step_comparable = False
    rule = "metrics.jsonl: median over the steps after the first" + (" of each launch" if several else "")
    last = summary if summary and not several else None  # the summary's median and tokens/s: the last launch's
    step_time = _number(last.get("median_step_time_s")) if last else None
    tokens = _number(last.get("tokens_per_s")) if last else None
    peaks = summary.get("peak_memory_per_rank_bytes") if summary else None
    peak = float(max(peaks)) if isinstance(peaks, list) and peaks else None
    logged_peak = run_peak(rows)
    if several and peak is not None and logged_peak is not None and logged_peak > peak:
        peak = None  # an earlier launch's rank 0 peaked above every rank of the last one: metrics.jsonl's stands
    peak_source = f"run_summary.json: largest rank's peak ({memory_kind})" if summary else ""
    if several and peak is not None:
        peak_source += ", above rank 0's of every launch in metrics.jsonl"
    throughput_source = predicted.throughput_source or "plan.json: throughput"
    memory_source = f"plan.json memory total: {plan.memory.sources.get('total', plan.memory.peak_phase)}"
    figures = [  # name, measured (the summary's when it has it) and its source, predicted and its source
        (
            "step_time_s",
            _first((step_time, "run_summary.json: median step time"), (steady_median(rows, "step_s"), rule)),
            (predicted.step_time_s, throughput_source),
        ),
        (
            "tokens_per_s",
            _first(
                (tokens, "run_summary.json: tokens per step / median step time"),
                (steady_median(rows, "tokens_per_s"), rule),
            ),
            (predicted.tokens_per_s, throughput_source),
        ),
        (
            "peak_memory_bytes",
            _first(
                (peak, peak_source),
                (
                    logged_peak,
                    "metrics.jsonl: largest peak_memory_bytes of rank 0" + (", every launch" if several else ""),
                ),
            ),
            (float(predicted.peak_memory_bytes) if predicted.peak_memory_bytes is not None else None, memory_source),
        ),
        (
            "mfu",
            (steady_median(rows, "mfu"), rule + " (logged on GPUs only)"),
            (speed.mfu if speed else None, speed.sources.get("mfu", "") if speed else ""),
        ),
    ]
    return [
        Comparison(
            name=name,
            measured=measured,
            measured_source=measured_source,
            predicted=expected,
            predicted_source=expected_source,
            comparable=step_comparable if name in ("step_time_s", "tokens_per_s") else comparable,
        )
        for name, (measured, measured_source), (expected, expected_source) in figures
    ]


def _first(*candidates: tuple[float | None, str]) -> tuple[float | None, str]:
    """The first (value, source) that has a value, else the last pair."""
    return next((pair for pair in candidates if pair[0] is not None), candidates[-1])


def tune_view(block: Any) -> TuneView | None:
    """plan.json's "tune" block, or None when the plan was not tuned (or the block is not one)."""
    if not isinstance(block, dict) or not isinstance(block.get("trials"), list):
        return None
    fields = set(TrialView.model_fields)
    trials = [
        TrialView.model_validate({key: value for key, value in trial.items() if key in fields})
        for trial in block["trials"]
        if isinstance(trial, dict) and "label" in trial
    ]
    winner = block.get("winner")
    return TuneView(winner=winner if isinstance(winner, str) else None, trials=trials)


def run_report(
    plan: Plan,
    run: RunConfig,
    rows: list[dict[str, Any]],
    *,
    title: str,
    summary: dict[str, Any] | None = None,
    tune: Any = None,
) -> RunReport:
    """The page's data for a run folder: curves, measured beside predicted, the tune trials."""
    found = launches(rows)
    said = [str(line) for line in summary.get("lines", [])] if summary else []
    if len(found) > 1 and said:  # the summary's sentences are its launch's: said so, not passed off as the run's
        steps = f"steps {found[-1].first_step}-{found[-1].last_step}"
        said = [f"the last launch's ({steps}; the table above is the whole run's):", *said]
    return RunReport(
        title=title,
        plan=candidate_view(plan, 1),
        curves=curves(rows),
        comparisons=comparisons(plan, run, rows, summary),
        summary_lines=said,
        launches=found,
        tune=tune_view(tune),
        sources=plan_sources([plan]),
    )
