"""One training micro-step driven through a ZeroOptimizer's entry points, as the engine calls them (world of one).

Shared by the single-process ZeRO tests (tests/test_gradient_arena.py, tests/test_heap_trim.py).
"""

from __future__ import annotations

from typing import Any


def zero_train_step(model: Any, zero: Any, batch: Any, boundary: bool = True) -> None:
    """Forward, backward and (at a boundary) the step of a squared-output loss on `batch`."""
    zero.begin_forward()
    loss = model(batch).pow(2).mean()
    zero.begin_backward(boundary)
    loss.backward()
    zero.end_backward(boundary)
    if boundary:
        zero.step()
        zero.zero_grad()
