"""`watch RUN_DIR [--follow] [--json]`: how a run is going, from its metrics.jsonl and run_status.json.

Works on a run started anywhere (launch.sh, sbatch, `train`), from any shell
that sees the folder: step and ETA, the loss now and averaged, the latest
evaluation, throughput, memory, warnings, and the measured-vs-predicted
summary once it has finished. --follow refreshes until the run ends, or until it sees that no
process holds the run's lock any more (backends/runner/run_lock.py).
Reads files only: no torch, instant.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import typer

from planner.errors import UserInputError

REFRESH_S = 2.0
AVERAGE_OVER = 20


def snapshot(run_dir: Path) -> dict[str, Any]:
    """Everything `watch` shows, as one JSON-able dict."""
    from backends.runner.metrics import read_metrics
    from backends.runner.status import read_status

    status = read_status(run_dir)
    if status.get("state") == "running":
        from backends.runner.run_lock import LOCK_FILE, run_alive

        if run_alive(run_dir) is False:  # nobody holds the run's lock: killed, or its machine went down
            status = {
                **status,
                "state": "gone",
                "message": f"no process holds {LOCK_FILE}: the run ended without finishing (killed?); "
                "`train` resumes it from its newest checkpoint",
            }
    rows = read_metrics(run_dir / "metrics.jsonl")
    train = [row for row in rows if row.get("kind") == "train"]
    evals = [row for row in rows if row.get("kind") == "eval"]
    latest = train[-1] if train else {}
    recent = train[-AVERAGE_OVER:]
    total = status.get("total_steps")
    step = latest.get("step", status.get("step", 0))
    seconds = _numbers(recent, "step_s")
    eta = (
        (total - step) * sum(seconds) / len(seconds) if seconds and total and status.get("state") == "running" else None
    )
    losses = _numbers(recent, "loss")
    rates = sorted(_numbers(recent, "tokens_per_s"))
    state = status.get("state", "not started" if not train else "unknown")
    message = status.get("message", "")
    if state == "not started" and not message:  # an emitted folder nobody has trained yet
        message = f"nothing trained here yet (no metrics.jsonl); `hardware-selector train {run_dir}` starts it"
    summary_file = run_dir / "run_summary.json"
    summary = (
        json.loads(summary_file.read_text()) if summary_file.is_file() and status.get("state") != "running" else {}
    )
    return {
        "state": state,
        "step": step,
        "total_steps": total,
        "eta_s": eta,
        "loss": latest.get("loss"),
        "loss_average": sum(losses) / len(losses) if losses else None,
        "loss_average_steps": len(losses),  # the last AVERAGE_OVER steps, or fewer when fewer have run
        "lr": latest.get("lr"),
        "grad_norm": latest.get("grad_norm"),
        "tokens_per_s": latest.get("tokens_per_s"),
        # the median, as run_summary.json and the benchmark record count the rate: one step is noisy
        "tokens_per_s_median": statistics.median(rates) if rates else None,
        "tokens_per_s_steps": len(rates),
        "mfu": latest.get("mfu"),
        "peak_memory_bytes": latest.get("peak_memory_bytes"),
        "eval": evals[-1] if evals else None,
        "anomalies": [row for row in train if "anomaly" in row][-5:],
        "message": message,
        "summary": summary.get("lines", []),
        **{key: status.get(key) or planned for key, planned in zip(("model", "strategy"), _planned(run_dir))},
    }


def render(view: dict[str, Any]) -> Any:
    from rich.table import Table

    from planner.progress import format_duration

    title = f"{view['model'] or 'run'} ({view['strategy'] or '?'}): {view['state']}"
    table = Table(title=title, show_header=False)
    table.add_column("what")
    table.add_column("value")
    total = view["total_steps"]
    progress = f"{view['step']}/{total}" if total else str(view["step"])
    if view["eta_s"] is not None:
        progress += f", ETA {format_duration(view['eta_s'])}"
    table.add_row("step", progress)
    if view["loss"] is not None:
        steps = view["loss_average_steps"]
        mean = f"mean of the last {steps} steps" if steps > 1 else "one step so far"
        table.add_row("loss", f"{view['loss']:.4f} ({mean}: {view['loss_average']:.4f})")
    if view["eval"]:
        table.add_row(
            "eval",
            f"loss {view['eval']['eval_loss']:.4f}, perplexity {view['eval']['perplexity']:.2f} "
            f"at step {view['eval']['step']}",
        )
    if view["tokens_per_s"]:
        steps = view.get("tokens_per_s_steps", 0)
        median = view.get("tokens_per_s_median")
        speed = f"{view['tokens_per_s']:,.0f} tokens/s (last step"
        speed += f"; median of the last {steps} steps: {median:,.0f})" if steps > 1 and median else ")"
        table.add_row("speed", speed + (f", MFU {view['mfu']:.1%}" if view.get("mfu") else ""))
    if view["lr"] is not None:
        table.add_row(
            "lr / grad norm",
            f"{view['lr']:.3g} / {view['grad_norm']:.3g}" if view["grad_norm"] is not None else f"{view['lr']:.3g}",
        )
    if view["peak_memory_bytes"]:
        table.add_row("peak memory (rank 0)", f"{view['peak_memory_bytes'] / 2**30:.2f} GiB")
    for row in view["anomalies"]:
        table.add_row("anomaly", f"step {row['step']}: {row['anomaly']['reason']} ({row['anomaly']['action']})")
    if view["message"]:
        table.add_row("message", view["message"])
    for line in view["summary"]:
        table.add_row("summary", line)
    return table


def register(app: typer.Typer) -> None:
    @app.command("watch")
    def watch_command(
        run_dir: Path = typer.Argument(..., help="A run folder (written by `plan --emit`, trained by the runner)."),
        follow: bool = typer.Option(False, "--follow", "-f", help="Refresh until the run ends."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """Show how a run is going: step, ETA, loss, evaluation, speed, memory, warnings."""
        from rich.console import Console
        from rich.live import Live

        if not run_dir.is_dir() or not (run_dir / "plan.json").is_file():
            raise UserInputError(f"{run_dir} is not a run folder (no plan.json); pass the folder `plan --emit` wrote")
        if as_json:
            print(json.dumps(snapshot(run_dir), indent=2))
            return
        console = Console()
        if not follow:
            console.print(render(snapshot(run_dir)))
            return
        with Live(render(snapshot(run_dir)), console=console, refresh_per_second=1) as live:
            while True:
                view = snapshot(run_dir)
                live.update(render(view))
                if view["state"] in ("finished", "stopped", "interrupted", "failed", "gone"):
                    break
                time.sleep(REFRESH_S)


def _planned(run_dir: Path) -> tuple[str | None, str | None]:
    """The model and strategy plan.json names, for a run that has not written its status yet (None, None when
    plan.json cannot be read: `train` says why)."""
    try:
        document = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
        return str(document["run"]["model"]["name"]), str(document["config"]["strategy"])
    except (OSError, ValueError, KeyError, TypeError):
        return None, None


def _numbers(rows: list[dict], key: str) -> list[float]:
    """The rows' values of `key` that are numbers (a hand-edited metrics.jsonl may hold anything)."""
    return [row[key] for row in rows if isinstance(row.get(key), (int, float)) and not isinstance(row.get(key), bool)]
