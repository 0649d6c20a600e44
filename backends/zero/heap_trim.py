"""LateBackwardTrim: hand the C heap's free pages back once per backward, before its last unit's gradients.

On CPU, glibc serves tensors below its mmap threshold (which rises to 32 MiB
as freed mapped blocks teach it) from its heap and keeps their pages
resident after they are freed. Backward frees the activations block by block
into that heap, while the tensors it allocates last are larger than any
threshold (a GPT's vocabulary-sized embedding gradient, and the sum of it and
the tied head's, 147 MiB each on GPT-2-small) and are mapped afresh on top.
So the step's peak resident set was the weights, optimizer states and
gradients, plus ~650 MiB of freed activations and backward temporaries that
glibc kept, plus those transients (docs/performance.md, "Engine vs peers",
measured per phase).

One malloc_trim(0) when every unit's gradients but one unit's have arrived
(the last unit is the one holding the first layers: the embeddings, whose
backward makes those transients) gives the freed activations' pages back
before that. It changes no value, only which pages are resident; the next
forward faults the pages it reuses back in. Linux with glibc, CPU tensors
only; elsewhere nothing is done (CUDA has its own caching allocator).
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any


def _malloc_trim() -> Any:
    if sys.platform != "linux":
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim  # glibc; musl has none
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


MALLOC_TRIM = _malloc_trim()


class LateBackwardTrim:
    """Counts each unit's arrived gradients in a backward; trims the heap when one unit is left to complete."""

    def __init__(self, units: list[Any], device: Any):
        self.sizes = {id(unit): len(unit.params) for unit in units}
        # One unit: no point inside backward is late enough. GPU: its memory is not the C heap's.
        self.enabled = MALLOC_TRIM is not None and device.type == "cpu" and len(units) > 1
        self.trims = 0  # how many times the heap was trimmed (tests read it)
        self.begin()

    def begin(self) -> None:
        """A backward starts: no unit has its gradients yet."""
        self.arrived = dict.fromkeys(self.sizes, 0)
        self.incomplete = len(self.sizes)

    def arrived_one(self, unit: Any) -> None:
        """One of `unit`'s parameters got its gradient for this backward."""
        key = id(unit)
        self.arrived[key] += 1
        if self.arrived[key] != self.sizes[key]:
            return
        self.incomplete -= 1
        if self.incomplete == 1 and self.enabled:
            self.trims += 1
            MALLOC_TRIM(0)
