"""`report RUN_DIR [-o FILE]`: a run folder's page: its curves, the plan's prediction beside the measurement, and
the tune trials that chose it (docs/running.md, "Report").

Reads files only (plan.json, metrics.jsonl, run_summary.json): no torch. The page is planner/report's; this
command finds the folder's files and says in one line what is missing.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import typer

from planner.errors import UserInputError


def _summary(run_dir: Path) -> dict | None:
    """run_summary.json when the run finished and the file reads as an object; otherwise None."""
    path = run_dir / "run_summary.json"
    if not path.is_file():
        return None
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # a damaged summary: the page takes its figures from metrics.jsonl instead
    return document if isinstance(document, dict) else None


def _tune_block(run_dir: Path):
    try:
        document = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return document.get("tune") if isinstance(document, dict) else None


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report_command(
        run_dir: Path = typer.Argument(
            ..., help="A run folder that has trained (its metrics.jsonl) or that `tune` measured (plan.json's trials)."
        ),
        output: Path | None = typer.Option(
            None, "--output", "-o", help="The page to write (default RUN_DIR/report.html)."
        ),
    ) -> None:
        """Write a run's report page: loss, throughput, MFU and memory over time beside the plan's prediction.

        The folder must have trained (metrics.jsonl) or been measured by `tune`; before either it says so."""
        from planner.report.page import check_report_target, require_plotly
        from planner.rundir.plan_file import read_plan_file

        require_plotly("report")  # before anything is read: the extra is missing whatever the folder holds
        if not run_dir.is_dir():
            what = f"{run_dir} is a file, not a run folder" if run_dir.exists() else f"{run_dir}: no such run folder"
            raise UserInputError(f"{what}; emit one with `hardware-selector plan ... --emit DIR`")
        plan, run = read_plan_file(run_dir)  # a folder that is not a run says so before where the page would go
        target = check_report_target(output if output is not None else run_dir / "report.html", "report -o")
        from backends.runner.metrics import read_metrics

        rows = read_metrics(run_dir / "metrics.jsonl")
        tune = _tune_block(run_dir)
        if not any(row.get("kind") == "train" for row in rows) and tune is None:
            again = f"hardware-selector train {shlex.quote(str(run_dir))}"  # pasted into a shell: a space is quoted
            raise UserInputError(
                f"{run_dir} has no training metrics yet (metrics.jsonl) nor tune trials (plan.json); train it first: {again}"
            )
        from planner.report.page import write_page
        from planner.report.run_data import run_report
        from planner.search.strategy_layout import family_label

        title = f"{run.model.name}: {family_label(plan.config)} on {run.world_size} x {plan.cluster.gpu.name} ({run_dir.name})"
        write_page(target, run_report(plan, run, rows, title=title, summary=_summary(run_dir), tune=tune))
        print(f"wrote the report page to {target}")
