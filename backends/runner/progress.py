"""What rank 0 shows while training: a rich progress bar with ETA on a terminal, plain lines otherwise.

Plain lines (a log file, SLURM output, CI) come every `every` steps and at
the end, so a long run's log stays readable. Warnings and evaluation results
are printed through the same object, so they never tear the bar.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from planner.progress import format_duration


class Progress:
    def __init__(self, *, enabled: bool, total: int, start: int, every: int = 10, stream: Any = None):
        self.enabled = enabled
        self.total, self.start, self.every = total, start, max(1, every)
        self.stream = stream or sys.stdout
        self.began = time.perf_counter()
        self.bar: Any = None
        self.task: Any = None
        if enabled and self.stream.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(
                TextColumn("train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
            )
            self.task = self.bar.add_task("train", total=total, completed=start, status="")
            self.bar.start()

    def eta(self, step: int) -> float | None:
        done = step - self.start
        if done <= 0:
            return None
        return (time.perf_counter() - self.began) / done * (self.total - step)

    def update(self, step: int, status: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(self.task, completed=step, status=status)
            return
        if step % self.every == 0 or step == self.total:
            eta = self.eta(step)
            suffix = f", ETA {format_duration(eta)}" if eta is not None else ""
            print(f"step {step}/{self.total}: {status}{suffix}", file=self.stream, flush=True)

    def say(self, line: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
