"""A process's peak memory, and how to start counting it afresh (one process running several tune trials).

On a GPU it is CUDA's max-allocated bytes. On the CPU it is the peak resident set: Linux's VmHWM in
/proc/self/status, which writing "5" to /proc/self/clear_refs resets to the current resident set (proc(5)).
getrusage's ru_maxrss is the fallback where /proc is not there; it cannot be reset, so there a process that
ran an earlier trial reports that trial's peak when it was the larger (docs/running.md, "Tune").
"""

from __future__ import annotations

import ctypes
import gc
import resource
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
RESET_PEAK_RSS = "5"  # proc(5): "reset the peak resident set size ("high water mark") to the current value"


def peak_rss_bytes() -> int:
    try:
        for line in STATUS.read_text(encoding="ascii").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated(device))
    return peak_rss_bytes()


def reset_peak_memory(device_type: str) -> None:
    """Count the peak from here: the garbage of what ran before collected, freed heap pages handed back."""
    gc.collect()
    if device_type == "cuda":
        import torch

        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # glibc keeps freed pages resident otherwise
    except (OSError, AttributeError):
        pass
    try:
        CLEAR_REFS.write_text(RESET_PEAK_RSS, encoding="ascii")
    except OSError:
        pass


class MemoryLimitExceeded(MemoryError):
    """A rank passed the run's --memory-limit-gb: reported as out of memory, as the GPU it stands for would."""


def check_memory_limit(limit_gb: float | None, device: torch.device, rank: int) -> None:
    if limit_gb is None:
        return
    peak = peak_memory_bytes(device)
    if peak > limit_gb * 1e9:
        kind = "allocated" if device.type == "cuda" else "resident"
        raise MemoryLimitExceeded(
            f"out of memory: rank {rank} peaked at {peak / 1e9:.3g} GB {kind}, over --memory-limit-gb {limit_gb:g}; "
            "lower the micro-batch, turn on activation checkpointing, plan a sharded strategy, or raise the limit"
        )
