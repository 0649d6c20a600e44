"""`db`: the benchmark database: list, show, export, import, calibration.

DuckDB is imported only by these commands, never when planning.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

db_app = typer.Typer(help="Benchmark records: list, show, share (export/import) and calibrate.", no_args_is_help=True)

DB_OPTION = typer.Option(
    None, "--db", help="Database file (default: $HARDWARE_SELECTOR_DB or ~/.cache/hardware-selector/benchmarks.duckdb)."
)


def _store(db: Path | None):
    from benchmarks_db.store import BenchmarkStore

    return BenchmarkStore(db)


def _console():
    """Rich's console; a pipe gets wide lines rather than rich's 80 columns of wrapped cells."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=200)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:,.1f} ms" if value < 1 else f"{value:,.2f} s"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


# How a database gets records, for the commands that find none.
RECORDS_HOW = (
    "`hardware-selector train RUN_DIR` on the plan's GPUs records its run beside the plan's prediction "
    "(`run-training-benchmark ... --run` records a matrix)"
)


@db_app.command("list")
def list_command(
    db: Path | None = DB_OPTION,
    gpu: str | None = typer.Option(None, "--gpu", help="Only runs on this GPU."),
    model: str | None = typer.Option(None, "--model", help="Only runs of this model."),
    strategy: str | None = typer.Option(
        None, "--strategy", help="Only this strategy (ddp, fsdp-full, zero2+offload, ...)."
    ),
    status: str | None = typer.Option(None, "--status", help="ok, oom, error or timeout."),
    limit: int = typer.Option(50, "--limit", min=1, max=1_000_000, help="At most this many, newest first."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list."),
) -> None:
    """List recorded runs, newest first."""
    from rich import box
    from rich.table import Table

    store = _store(db)
    gpu = _gpu_filter(gpu)
    if strategy is None:
        runs = store.runs(gpu=gpu, model=model, status=status, limit=limit)
        # How many the filters match, when --limit may have cut them (the title said "3 runs" of 8 held).
        held = len(runs) if len(runs) < limit else len(store.runs(gpu=gpu, model=model, status=status))
    else:  # by the name the table shows (an offloading run's family: RunRecord.strategy_label), not the column's
        wanted = strategy.strip().lower()
        matching = store.runs(gpu=gpu, model=model, status=status)
        # A family name takes its variants too: `--strategy fsdp` lists fsdp-full and fsdp-grad-op (it listed none).
        chosen = [run for run in matching if run.strategy_label.lower() in (wanted, *_variants(wanted))]
        runs, held = chosen[:limit], len(chosen)
    if not runs:
        _check_filters_can_match(store, gpu, strategy, status)
    if as_json:
        print(json.dumps([run.model_dump(mode="json") for run in runs], indent=2))
        return
    if not store.path.exists():  # as `db calibration` says it, not an empty table under "0 runs in"
        print(f"no benchmark database at {store.path}: nothing recorded yet; {RECORDS_HOW}")
        return
    from planner.units import counted

    shown = f"the newest {len(runs)} of {held} runs" if held > len(runs) else counted(len(runs), "run")
    table = Table(title=f"{shown} in {store.path}", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("id", "date", "model", "hardware", "strategy", "mb×acc", "status", "step", "tokens/s", "predicted"):
        table.add_column(column, justify="right" if column in ("step", "tokens/s", "predicted") else "left")
    for run in runs:
        table.add_row(
            run.id[:8],
            f"{run.created_at:%m-%d %H:%M}",
            run.model_name + ("*" if run.tiny else ""),
            f"{run.gpu_count}×{run.gpu_name}" + (" (CPU)" if ran_on_cpu(run) else ""),
            run.strategy_label,
            f"{run.micro_batch}×{run.grad_accum}",
            run.status.value,
            _seconds(run.step_time_median_s),
            _rate(run.tokens_per_s),
            _rate(run.predicted_tokens_per_s),
        )
    console = _console()
    console.print(table)
    if any(run.tiny for run in runs):
        console.print("* tiny: the model's architecture at test sizes", style="dim")
    if any(ran_on_cpu(run) for run in runs):
        console.print("(CPU): a --tiny trial of that GPU's plan, run on this machine's CPU processes", style="dim")


def _gpu_filter(gpu: str | None) -> str | None:
    """A catalog GPU by any of its spellings ("nvidia a100-sxm4-80gb"), as records name it; else as typed."""
    from planner.errors import UserInputError
    from planner.hardware.gpus import resolve_gpu

    try:
        return resolve_gpu(gpu).name if gpu is not None else None
    except UserInputError:
        return gpu  # not in the catalog: an imported record may still name it


def _check_filters_can_match(store, gpu: str | None, strategy: str | None, status: str | None) -> None:
    """A filter no run could ever match (a typo, a status that does not exist) is said with the valid values,
    rather than "0 runs", which reads as "none recorded yet"."""
    from benchmarks_db.record import RunStatus
    from planner.errors import UserInputError
    from planner.hardware.gpus import resolve_gpu
    from planner.strategy_family import STRATEGY_FAMILIES_SAID, is_strategy_family

    if status is not None and status.strip().lower() not in {member.value for member in RunStatus}:
        raise UserInputError(f"--status {status}: a run's status is one of {', '.join(s.value for s in RunStatus)}")
    if strategy is not None and not is_strategy_family(strategy):
        raise UserInputError(f"--strategy {strategy}: recorded strategies are {STRATEGY_FAMILIES_SAID}")
    if gpu is not None and not store.runs(gpu=gpu, limit=1):
        try:
            resolve_gpu(gpu)
        except UserInputError as error:
            raise UserInputError(f"--gpu: {error}") from None


@db_app.command("show")
def show_command(
    run_id: str = typer.Argument(..., help="Run id or its first characters."), db: Path | None = DB_OPTION
) -> None:
    """Print one run, every field, as JSON."""
    record = _store(db).get(run_id)
    document = record.model_dump(mode="json")
    document["config"] = record.config.model_dump(mode="json")  # as the calibration reads it
    del document["config_json"]
    if document.get("prediction_json"):
        try:
            document["prediction"] = json.loads(document.pop("prediction_json"))
        except ValueError:  # an older version's row: shown as stored
            document["prediction"] = record.prediction_json
    print(json.dumps(document, indent=2))


@db_app.command("export")
def export_command(
    file: Path = typer.Argument(..., help="Target .parquet or .csv file."),
    db: Path | None = DB_OPTION,
    force: bool = typer.Option(False, "--force", help="Replace FILE if it exists (written whole, then swapped in)."),
) -> None:
    """Write every run to a Parquet or CSV file to share."""
    from benchmarks_db.transfer import export_runs

    count = export_runs(_store(db), file, force=force)
    print(f"exported {count} runs to {file}")


@db_app.command("import")
def import_command(
    file: Path = typer.Argument(..., help="A .parquet or .csv file written by `db export`."),
    db: Path | None = DB_OPTION,
) -> None:
    """Add another team's runs; bad rows are reported and skipped, known ids are not imported twice."""
    from benchmarks_db.transfer import import_runs

    store = _store(db)
    report = import_runs(store, file)
    print(
        f"imported {report.imported} of {report.rows} rows from {file} into {store.path} "
        f"({report.duplicates} already there, {len(report.bad_rows)} bad)"
    )
    for line in report.bad_rows:
        print(f"  skipped {line}", file=sys.stderr)
    if report.ignored_columns:
        print(f"  ignored unknown columns: {', '.join(report.ignored_columns)}", file=sys.stderr)
    if report.rows and report.bad_rows and not report.imported and not report.duplicates:  # exit 0 said it worked
        raise typer.Exit(1)


@db_app.command("calibration")
def calibration_command(
    db: Path | None = DB_OPTION,
    gpu: str | None = typer.Option(None, "--gpu", help="Only records of this GPU."),
    plot: Path | None = typer.Option(
        None, "--plot", help="Also draw predicted vs measured and throughput by strategy (.png or .html)."
    ),
) -> None:
    """Predicted vs measured step time per record, with the error before and after calibration."""
    from rich import box
    from rich.table import Table

    from benchmarks_db.record_errors import record_errors
    from planner.calibration import Calibration
    from planner.units import counted

    if plot is not None:
        from benchmarks_db.plot import check_plot_target

        check_plot_target(plot)
    store = _store(db)
    records = store.runs(gpu=gpu)
    calibration = Calibration.fit([record.measured_run() for record in records])
    errors = record_errors(records, calibration)
    console = _console()
    if not errors:  # an empty table said neither why nor what to do
        console.print(_nothing_to_compare(records, store.path), markup=False, highlight=False)
        if plot is not None:
            console.print(f"no plot written to {plot}: it would be empty", markup=False, highlight=False)
        return
    table = Table(
        title=f"{len(errors)} of {len(records)} measured runs in {store.path} carry a predicted step time",
        caption="before / after: the predicted / calibrated step time against the measured one (+: predicted slower)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for column in ("id", "hardware", "strategy", "mb×acc", "predicted", "calibrated", "measured", "before", "after"):
        table.add_column(column, justify="left" if column in ("id", "hardware", "strategy") else "right")
    for error in errors:
        run = error.record
        table.add_row(
            run.id[:8],
            f"{run.gpu_count}×{run.gpu_name}",
            run.strategy_label,
            f"{run.micro_batch}×{run.grad_accum}",
            _seconds(error.predicted_s),
            _seconds(error.calibrated_s),
            _seconds(error.measured_s),
            f"{error.error_before:+.0%}",
            f"{error.error_after:+.0%}",
        )
    console.print(table)
    # Over the runs the corrections were fitted on: a re-measured config's older runs are listed, not fitted.
    superseded = set(calibration.superseded)
    fitted = [error for error in errors if error.record.id not in superseded]
    if fitted:
        before = sum(abs(e.error_before) for e in fitted) / len(fitted)
        after = sum(abs(e.error_after) for e in fitted) / len(fitted)
        over = f"over the {counted(len(fitted), 'run')} fitted, " if len(fitted) < len(errors) else ""
        console.print(
            f"mean |error|: {before:.0%} before, {after:.0%} after calibration ({over}in-sample: the corrections "
            "were fitted on these same runs, so 'after' is how well they fit, not how well they predict)"
        )
    if calibration.copied:
        console.print(
            f"{counted(len(calibration.copied), 'record')} left out: its predicted step is an older record's "
            "measurement of the same config (stored by `train` before records kept the formula's step: "
            "docs/benchmarks.md, Calibration)",
            markup=False,
            highlight=False,
        )
    if calibration.superseded:
        runs = sum(c.records for c in calibration.corrections)
        configs = sum(c.configs or c.records for c in calibration.corrections)
        older = len(calibration.superseded)
        console.print(
            f"{counted(older, 'older record')} of re-measured configs {'is' if older == 1 else 'are'} listed but not "
            f"fitted: each config counts once in the corrections, by its newest run ({counted(runs, 'run')} of "
            f"{counted(configs, 'config')}: docs/benchmarks.md, Calibration)",
            markup=False,
            highlight=False,
        )
    for correction in [*calibration.corrections, *calibration.pooled]:
        console.print(f"correction {correction.describe()}", markup=False, highlight=False)
    if plot is not None:
        from benchmarks_db.plot import write_plot

        write_plot(errors, plot)
        console.print(f"wrote {plot}")


def _nothing_to_compare(records: list, path: Path) -> str:
    """Why `db calibration` has no row, and how a run gets one."""
    how = RECORDS_HOW
    if not records:
        return f"no measured runs in {path}: nothing to calibrate yet; {how}"
    failed = sum(1 for record in records if not record.step_time_median_s)
    reasons = [f"{failed} did not finish a step"] if failed else []
    if len(records) > failed:
        reasons.append(
            f"{len(records) - failed} carry no predicted step time (a --tiny run, a run on another layout than "
            "its plan's, or a GPU plan run on CPU processes is recorded without one)"
        )
    runs = "1 run" if len(records) == 1 else f"{len(records)} runs"
    return f"{runs} in {path}, none to compare: {' and '.join(reasons)}; {how}"


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")


def ran_on_cpu(run) -> bool:
    """A record of a GPU plan whose ranks ran on CPU processes (a --tiny trial on a machine without CUDA)."""
    return run.interconnect == "host-memory" and run.gpu_name != "cpu"


def _variants(family: str) -> tuple[str, ...]:
    """The stored strategy names a family name stands for in `db list --strategy` (records say fsdp-full)."""
    return {"fsdp": ("fsdp-full", "fsdp-grad-op", "fsdp-hybrid", "fsdp-no-shard")}.get(family, ())
