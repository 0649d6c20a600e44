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


def zero_train_step(zero: Any, forward: Any, boundary: bool = True) -> None:
    """One micro-step of a ZeroOptimizer driven directly: forward() gives the loss; at a boundary, the step."""
    zero.begin_forward()
    loss = forward()
    zero.begin_backward(boundary)
    loss.backward()
    zero.end_backward(boundary)
    if boundary:
        zero.step()
        zero.zero_grad()
