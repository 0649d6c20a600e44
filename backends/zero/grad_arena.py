"""GradientArena: every bucket's local gradients carved out of one flat buffer (ZeRO-0/1/2).

Each unit's grad_full is a view of the arena at the unit's offset, so a bucket
is never allocated on its own: the runner's DeepSpeed-sized buckets (589,824
elements for GPT-2-small, ~200 of them) used to be ~200 allocations of 2.4 MB
per step, and on CPU glibc kept the freed mid-size blocks in its heap (about
350 MiB of peak RSS at ZeRO-1, docs/performance.md "Engine vs peers").

Stages 1 and 2 release the arena's memory after the reduction, so the
optimizer step does not run beside a full copy of the gradients; it is then
one block far above glibc's mmap threshold, which goes back to the system
whole, and comes back as fresh pages that become resident only as backward
writes them. Releasing resizes the storage in place, so the units' views stay
valid across steps. Stage 0 keeps the arena and zeroes it after the reduction.

One buffer cannot be freed bucket by bucket, so on Linux CPU a reduced
bucket's pages are handed back with madvise(MADV_DONTNEED) (discard): ZeRO-2
reduces during backward, and without that its peak held every bucket's full
gradients where DeepSpeed's holds the reduced shard and a few buckets. The
mapping stays; a discarded page reads as zeros and is faulted in again only if
written, which no reduced bucket is before the arena is released.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from backends.zero.flat_unit import FlatUnit

MADV_DONTNEED = 4  # Linux: drop the pages now; the next touch maps a zeroed page
PAGE = 4096


def _libc() -> Any:
    if sys.platform != "linux":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


LIBC = _libc()


class GradientArena:
    def __init__(self, units: list[FlatUnit], dtype: Any, device: Any):
        import torch

        total = sum(unit.padded for unit in units)
        self.units = units
        self.flat = torch.empty(total, dtype=dtype, device=device)
        self.allocations = 0  # how many times the arena's memory was (re)acquired
        position = 0
        for unit in units:
            unit.grad_full = self.flat[position : position + unit.padded]
            unit.grad_held = [False] * len(unit.params)
            position += unit.padded
        self.flat.untyped_storage().resize_(0)  # views first (torch checks their bounds); no memory until backward

    @property
    def nbytes(self) -> int:
        return self.flat.numel() * self.flat.element_size()

    def is_materialized(self) -> bool:
        return self.flat.untyped_storage().nbytes() > 0

    def acquire(self) -> None:
        """Give the arena its memory back if it was released; a fresh arena holds no gradient yet.

        Only the units' padding is written here: each parameter's view is filled by its first gradient
        of the window (stage1.py), so the pages are touched as backward reaches them.
        """
        if self.is_materialized():
            return
        self.flat.untyped_storage().resize_(self.nbytes)
        self.allocations += 1
        for unit in self.units:
            unit.grad_full[unit.numel :].zero_()
            unit.grad_held = [False] * len(unit.params)

    def discard(self, unit: FlatUnit) -> None:
        """Hand the pages wholly inside a reduced unit's view back to the system (Linux CPU; else nothing).

        Only whole pages strictly inside the view: a page shared with a neighbour, or with the allocator's
        header before the buffer, keeps its bytes. The unit's parameters drop their .grad views.
        """
        for param in unit.params:
            param.grad = None
        unit.grad_held = [False] * len(unit.params)
        view = unit.grad_full
        if LIBC is None or view.device.type != "cpu" or not self.is_materialized():
            return
        begin = view.data_ptr()
        end = begin + view.numel() * view.element_size()
        first, last = -(-begin // PAGE) * PAGE, end // PAGE * PAGE
        if last > first:
            LIBC.madvise(first, last - first, MADV_DONTNEED)

    def release(self) -> None:
        """Drop the arena's memory (the views stay, pointing at no bytes) and the parameters' .grad views."""
        for unit in self.units:
            for param in unit.params:
                param.grad = None
            unit.grad_held = [False] * len(unit.params)
        self.flat.untyped_storage().resize_(0)
