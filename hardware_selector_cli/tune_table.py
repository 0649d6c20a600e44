"""tune's table of trials: predicted against measured step, tokens/s, peak memory and overhead, with a legend
line for each column (docs/running.md, "tune", What it prints)."""

from __future__ import annotations

# The table's legend for its last two columns (the runner's run_summary.json says which memory it measured).
OVERHEAD = "the trial's share of its launch's start-up, plus its set-up (its wall time less its steps)"
PEAK_MEMORY = {"cpu": "host peak RSS: these trials ran on CPU", "cuda": "CUDA's peak allocated, or host RSS on CPU"}


def print_trials(found, outcome, db_path, device: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from benchmarks.harness.tune import measured_order

    memory = PEAK_MEMORY[device]
    launches = f"{outcome.launches} launch" + ("es" if outcome.launches != 1 else "")
    read_back = f" ({outcome.skipped} read back, timed as their own tune asked)" if outcome.skipped else ""
    timed = (
        f"{outcome.timed_steps} timed steps per trial after 2 warm-up steps{read_back}"
        if outcome.timed_steps
        else "every trial read back from the database"
    )
    table = Table(title=f"tune: {timed}, {launches}")
    # Fits 80 columns: predicted and measured seconds per step, their ratio, tokens/s, peak memory per rank and
    # the trial's launch overhead (its share of its launch's start-up, and its set-up: wall time less steps).
    for column in ("#", "strategy", "pred s", "meas s", "meas/pred", "tokens/s", "peak", "launch s"):
        table.add_column(column, justify="left" if column == "strategy" else "right", no_wrap=column != "strategy")
    for place, trial in enumerate(measured_order(found), 1):
        ok = trial.status == "ok"
        table.add_row(
            str(place) if ok else "-",
            trial.label,
            f"{trial.predicted_step_s:.3g}" if trial.predicted_step_s else "-",
            f"{trial.measured_step_s:.3g}" if ok and trial.measured_step_s else trial.status,
            f"{trial.ratio:.2f}" if ok and trial.ratio else "-",
            f"{trial.tokens_per_s:,.0f}" if ok and trial.tokens_per_s else "-",
            f"{trial.peak_memory_bytes / 2**30:.2f}G" if trial.peak_memory_bytes else "-",
            f"{trial.launch_overhead_s:.1f}" if trial.launch_overhead_s is not None else "-",
        )
    Console().print(table)
    skipped = outcome.skipped
    note = (
        f"; {skipped} trial(s) were already measured, read from {db_path}" if skipped else f" (recorded in {db_path})"
    )
    print(f"pred: the search's step time (its sources: `plan --explain`); meas: this machine{note}")
    print(f"peak: a rank's highest memory in the trial ({memory}); launch s: {OVERHEAD}")
