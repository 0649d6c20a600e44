"""The CPU allocations torch's profiler saw, for tests that count allocations instead of timing anything."""

from __future__ import annotations

from typing import Any


def allocated_sizes(profiler: Any) -> list[int]:
    """Bytes of every allocation in a `profile(..., profile_memory=True)` run: a storage resize from Python is
    a "[memory]" event, an allocation inside an op is that op's self memory."""
    sizes = []
    for event in profiler.events():
        usage = event.cpu_memory_usage if event.name == "[memory]" else event.self_cpu_memory_usage
        if usage > 0:
            sizes.append(usage)
    return sizes
