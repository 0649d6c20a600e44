"""The garbage collector while the command line runs (docs/performance.md, "Planner speed").

Starting a command creates some 40,000 objects that live as long as the process: modules, classes, pydantic's
schemas and validators, typer's option tables. CPython collects its young generation every 700 new objects,
so `plan` walked them ~100 times (~20 ms of its ~0.39 s CPU), and the interpreter's last collection, at exit,
walked every one again (~30 ms) to free memory that the operating system takes back anyway.

`collecting_less` raises the young generation's threshold while a command runs (collections still happen, every
100,000 new objects) and restores it when the command returns: tests and scripts run several commands in one
process. What the command left is first moved to the oldest generation without a walk (gc.freeze, then
gc.unfreeze): restored to 700, the collector would otherwise walk the ~60,000 young objects at once, ~20 ms.
At exit the heap is frozen (gc.freeze: the last collection skips it). Only objects still alive then are left
unfreed, and CPython never promises that their __del__ runs (its reference, "object.__del__"); files and
connections are closed where they are used, and atexit handlers registered later run before the freeze.
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 100_000

_freezes_at_exit = False


@contextmanager
def collecting_less() -> Iterator[None]:
    global _freezes_at_exit
    saved = gc.get_threshold()
    if saved[0]:  # 0: automatic collection is off, and stays off
        gc.set_threshold(max(saved[0], YOUNG_THRESHOLD), *saved[1:])
    if not _freezes_at_exit:
        atexit.register(gc.freeze)
        _freezes_at_exit = True
    try:
        yield
    finally:
        if not gc.get_freeze_count():  # never unfreeze what the caller froze
            gc.freeze()  # every generation into the permanent one, the young generation's count back to 0
            gc.unfreeze()  # and all of it into the oldest generation: collected at the next full collection
        gc.set_threshold(*saved)
