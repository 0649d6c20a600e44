"""Progress of long work that is not a training step: tokenizing, tune trials, a DB import, a checkpoint export.

On a terminal it is a rich progress bar with the elapsed time and an ETA. Elsewhere (a log file, SLURM output,
CI) the bar would be noise, and a short job should print nothing at all; so once the work has run for
`quiet_s` seconds, a plain line comes at each further tenth of the total, with the ETA (docs/running.md,
"Progress"). Training has its own bar, with the step's loss and speed (backends/runner/progress.py).

The ETA is the elapsed time scaled by what remains: total and amounts are in whatever unit the work counts
(bytes read, trials, rows), and an amount past the total is held at the total.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO


def format_duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class WorkProgress:
    """`with WorkProgress("tokenizing", total=size, unit="B") as progress: ... progress.advance(n)`."""

    def __init__(
        self,
        description: str,
        total: float,
        *,
        unit: str = "",
        stream: TextIO | None = None,
        quiet_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.description, self.total, self.unit = description, max(float(total), 0.0), unit
        self.stream = stream if stream is not None else sys.stderr
        self.quiet_s, self.clock = quiet_s, clock
        self.done = 0.0
        self.began = clock()
        self.tenths_said = 0
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> WorkProgress:
        if self.total > 0 and _is_terminal(self.stream):
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            count = MofNCompleteColumn() if not self.unit else TextColumn("{task.percentage:>3.0f}%")
            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                count,
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self.task = self.bar.add_task(self.description, total=self.total)
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def set_total(self, total: float) -> None:
        """The work turned out to be `total` after all (a benchmark matrix's configs still to run)."""
        self.total = max(float(total), 0.0)
        if self.bar is not None:
            self.bar.update(self.task, total=self.total)

    def eta_s(self) -> float | None:
        """Seconds left at the pace so far; None before anything is done."""
        if self.done <= 0 or self.total <= 0:
            return None
        return (self.clock() - self.began) / self.done * (self.total - self.done)

    def advance(self, amount: float = 1, *, note: str = "") -> None:
        self.done = min(self.total, self.done + max(amount, 0))
        if self.bar is not None:
            description = f"{self.description}: {note}" if note else self.description
            self.bar.update(self.task, completed=self.done, description=description)
            return
        if self.total <= 0 or self.clock() - self.began < self.quiet_s:
            return
        tenths = int(10 * self.done / self.total)
        if tenths > self.tenths_said:
            self.tenths_said = tenths
            eta = self.eta_s()
            suffix = f", ETA {format_duration(eta)}" if eta is not None and self.done < self.total else ""
            detail = f" ({note})" if note else ""
            print(f"{self.description}: {self.done / self.total:.0%}{detail}{suffix}", file=self.stream, flush=True)


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
