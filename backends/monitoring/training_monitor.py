"""TrainingMonitor: a run's metrics, the callbacks that act on them, system stats and per-phase memory.

    monitor = engine.training_monitor                  # or TrainingMonitor() in any loop
    monitor.add_callback("loss-ceiling", lambda metrics, step: "stop" if metrics["loss"] > 20 else None)
    monitor.track_metric("tokens_per_s", 1.2e4, step)
    monitor.get_system_stats()                         # GPU memory and utilisation (NVML), CPU, RSS, host memory

A callback sees the step's metrics before the update and answers None (or
"ok"), "warn", "skip-step" or "stop", alone or with a reason: ("warn", "why").
The most severe answer wins (the engine skips the update, or stops at the
step, docs/engine.md "Monitoring"); the run's anomaly rules are registered
this way by the runner. MemoryProfiler records each phase's peak: CUDA's
max-allocated on GPUs, the process's resident memory on CPUs. Phase names
are open: any string.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

ACTIONS = ("ok", "warn", "skip-step", "stop")  # in rising severity
HISTORY = 10_000

Callback = Callable[[dict[str, float], int], Any]


@dataclass
class Decision:
    action: str = "ok"
    reasons: list[str] = field(default_factory=list)

    @property
    def applies_update(self) -> bool:
        return self.action not in ("skip-step", "stop")


class TrainingMonitor:
    def __init__(self, *, rank: int = 0, device_type: str = "cpu"):
        self.rank = rank
        self.history: dict[str, deque[tuple[int, float]]] = {}
        self.callbacks: dict[str, Callback] = {}
        self.writer: Any = None
        self.memory = MemoryProfiler(device_type)

    def track_metric(self, name: str, value: float, step: int) -> None:
        """Keep `value` of `name` at `step` (the latest HISTORY of each); also to TensorBoard when set."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a metric is named by a non-empty string, not {name!r}")
        value = float(value)
        self.history.setdefault(name, deque(maxlen=HISTORY)).append((int(step), value))
        if self.writer is not None and self.rank == 0 and math.isfinite(value):
            self.writer.add_scalar(name, value, int(step))

    def latest(self, name: str) -> float | None:
        values = self.history.get(name)
        return values[-1][1] if values else None

    def add_callback(self, name: str, fn: Callback) -> None:
        """fn(metrics, step), or fn(metrics): both are taken; any other signature is refused here, not at the
        first step."""
        if not callable(fn):
            raise TypeError(f"callback {name!r} must be a function of (metrics, step), not {type(fn).__name__}")
        self.callbacks[name] = _with_step(name, fn)

    def remove_callback(self, name: str) -> None:
        self.callbacks.pop(name, None)

    def decide(self, metrics: dict[str, float], step: int) -> Decision:
        """Every callback's answer for this step's metrics; the most severe wins, with every reason given."""
        decision = Decision()
        for name, fn in self.callbacks.items():
            answer = fn(dict(metrics), step)
            action, reason = (
                (answer if isinstance(answer, tuple) else (answer, "")) if answer is not None else ("ok", "")
            )
            if action not in ACTIONS:
                raise ValueError(f"callback {name!r} answered {action!r}; answer one of {', '.join(ACTIONS)} or None")
            if action != "ok":
                decision.reasons.append(f"{name}: {reason or action}")
                if ACTIONS.index(action) > ACTIONS.index(decision.action):
                    decision.action = action
        return decision

    def set_tensorboard_writer(self, writer: Any) -> None:
        """A torch.utils.tensorboard.SummaryWriter (or anything with add_scalar): every tracked metric goes there."""
        if writer is not None and not callable(getattr(writer, "add_scalar", None)):
            raise TypeError(f"the writer needs add_scalar(name, value, step); {type(writer).__name__} has none")
        self.writer = writer

    @staticmethod
    def get_system_stats() -> dict[str, Any]:
        return system_stats()


def system_stats() -> dict[str, Any]:
    """CPU, resident and host memory (psutil), and each GPU's memory and utilisation (NVML, when present)."""
    import psutil

    process = psutil.Process()
    host = psutil.virtual_memory()
    stats: dict[str, Any] = {
        "time": time.time(),
        "cpu_percent": psutil.cpu_percent(interval=None),
        "process_rss_bytes": process.memory_info().rss,
        "host_memory_total_bytes": host.total,
        "host_memory_available_bytes": host.available,
        "gpus": _nvml_gpus(),
    }
    return stats


def _nvml_gpus() -> list[dict[str, Any]]:
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            use = pynvml.nvmlDeviceGetUtilizationRates(handle)
            gpus.append(
                {
                    "index": index,
                    "memory_used_bytes": int(memory.used),
                    "memory_total_bytes": int(memory.total),
                    "utilization_percent": int(use.gpu),
                }
            )
        return gpus
    except pynvml.NVMLError:
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


class MemoryProfiler:
    """The peak memory of each named phase, over the phases seen since the last reset."""

    def __init__(self, device_type: str = "cpu"):
        self.device_type = device_type
        self.peaks: dict[str, int] = {}
        self.kind = "cuda max allocated" if device_type == "cuda" else "process resident memory (RSS)"

    def _now(self) -> int:
        if self.device_type == "cuda":
            import torch

            return int(torch.cuda.max_memory_allocated())
        import psutil

        return int(psutil.Process().memory_info().rss)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.device_type == "cuda":
            import torch

            torch.cuda.reset_peak_memory_stats()
        before = self._now()
        try:
            yield
        finally:
            self.peaks[name] = max(self.peaks.get(name, 0), before, self._now())

    def report(self) -> dict[str, Any]:
        return {"kind": self.kind, "peak_bytes": dict(self.peaks)}

    def reset(self) -> None:
        self.peaks.clear()


def _with_step(name: str, fn: Callable[..., Any]) -> Callback:
    """The callback as fn(metrics, step): one that takes only the metrics is wrapped."""
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: call it as documented
        return fn
    for arguments in (({}, 0), ({},)):
        try:
            signature.bind(*arguments)
        except TypeError:
            continue
        return fn if len(arguments) == 2 else (lambda metrics, step: fn(metrics))
    raise TypeError(f"callback {name!r} must take (metrics, step) or (metrics); its signature is {signature}")
