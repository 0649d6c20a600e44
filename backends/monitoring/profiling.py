"""Profiling: named sections of a step, and a torch profiler trace of one chosen step.

    from backends.monitoring.profiling import profile
    with profile("data"):            # shows in the trace, and as data_s in metrics.jsonl
        batch = next(loader)

`profile(name)` is a torch.profiler record_function, and, while an engine is
running, a phase of its step (the engine's StepMonitor writes `<name>_s` to
each metrics.jsonl row). The engine config's `hardware_selector.profiling`
block, {"step": N, "output": "profiles"}, records step N with the torch
profiler and writes a Chrome trace per rank, OUTPUT/step<N>-rank<r>.json
(open it in chrome://tracing or Perfetto). docs/engine.md, "Monitoring".
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_MONITORS: list[Any] = []  # the StepMonitors of the running engines, innermost last


def register(monitor: Any) -> None:
    _MONITORS.append(monitor)


def unregister(monitor: Any) -> None:
    if monitor in _MONITORS:
        _MONITORS.remove(monitor)


@contextmanager
def profile(name: str) -> Iterator[None]:
    from torch.profiler import record_function

    if not isinstance(name, str) or not name:
        raise ValueError(f"a profiled section is named by a non-empty string, not {name!r}")
    with record_function(name):
        if not _MONITORS:
            yield
            return
        with _MONITORS[-1].phase(name):
            yield


class StepTrace:
    """The torch profiler around one optimizer step, exported as a Chrome trace."""

    def __init__(self, step: int, output: str | Path, rank: int):
        self.step, self.output, self.rank = step, Path(output), rank
        self.profiler: Any = None
        self.path: Path | None = None

    def maybe_start(self, step: int) -> None:
        if step != self.step or self.profiler is not None or self.path is not None:
            return
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        activities = [ProfilerActivity.CPU]
        import torch

        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self.profiler = torch_profile(activities=activities, record_shapes=True, profile_memory=True)
        self.profiler.__enter__()

    def maybe_stop(self, step: int) -> None:
        if self.profiler is None or step != self.step:
            return
        self.profiler.__exit__(None, None, None)
        self.output.mkdir(parents=True, exist_ok=True)
        self.path = self.output / f"step{step}-rank{self.rank}.json"
        self.profiler.export_chrome_trace(str(self.path))
        self.profiler = None
