"""Per-step metrics: forward / backward / communication / optimizer time, tokens/s, memory, JSONL.

Memory is CUDA's max-allocated on GPUs; on the CPU it is the bytes of the
tensors the engine holds (parameters, shards, gradients, optimizer states)
plus the process's peak RSS, which includes activations and the allocator.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from backends.monitoring.peak_memory import peak_rss_bytes

HISTORY = 10_000


class StepMonitor:
    PHASES = ("forward", "backward", "comm", "optimizer")  # always reported; any other name is a phase too

    def __init__(self, rank: int = 0, jsonl_path: str | Path | None = None, device_type: str = "cpu"):
        self.rank = rank
        self.device_type = device_type
        self.jsonl_path = Path(jsonl_path) if jsonl_path and rank == 0 else None
        self.seconds = {phase: 0.0 for phase in self.PHASES}
        self.step_started = time.perf_counter()
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY)  # the latest steps, not the whole run

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a named phase of this step (open names: "data", "forward_pass", ...), reported as <name>_s."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - began)

    def add(self, name: str, seconds: float) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a phase is named by a non-empty string, not {name!r}")
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def end_step(self, step: int, *, loss: float, tokens: int, tracked_bytes: int, **extra: Any) -> dict[str, Any]:
        now = time.perf_counter()
        wall = now - self.step_started
        record: dict[str, Any] = {
            "step": step,
            "loss": loss,
            "step_time_s": wall,
            **{f"{phase}_s": seconds for phase, seconds in self.seconds.items()},
            "tokens": tokens,
            "tokens_per_s": tokens / wall if wall > 0 else 0.0,
            "tracked_bytes": tracked_bytes,
            "peak_rss_bytes": peak_rss_bytes(),
            **extra,
        }
        if self.device_type == "cuda":
            import torch

            record["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
        self.history.append(record)
        if self.jsonl_path is not None:
            self.jsonl_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.jsonl_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")
        self.seconds = {phase: 0.0 for phase in self.PHASES}
        self.step_started = now
        return record
