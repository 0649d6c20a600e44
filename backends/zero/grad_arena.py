"""GradientArena: every bucket's local gradients carved out of one flat buffer (ZeRO-0/1/2).

Each unit's grad_full is a view of the arena at the unit's offset, so a bucket
is never allocated on its own: the runner's DeepSpeed-sized buckets (589,824
elements for GPT-2-small, ~200 of them) used to be ~200 allocations of 2.4 MB
per step, and on CPU glibc kept the freed mid-size blocks in its heap
(docs/performance.md "Engine vs peers").

Stages 1 and 2 give the arena's memory back after the reduction, so the
optimizer step does not run beside a full copy of the gradients. On Linux CPU
the arena is allocated once and wiped instead: madvise(MADV_DONTNEED) hands
its pages back and leaves them reading as zeros, so the arena keeps its
address, is known to be zero, and becomes resident again page by page as
backward writes it. Being zero, every parameter's .grad can be its view before
backward, and autograd accumulates into it in place: no gradient tensor is
allocated and copied per parameter per step. Elsewhere (GPU, other systems)
its storage is resized to zero and back, and each parameter's first gradient
of the window is copied into its view as it arrives (stage1.py).

A reduced bucket's whole pages are discarded the same way (discard) while the
others are still reduced: ZeRO-2 reduces during backward, and without that its
peak held every bucket's full gradients. Stage 0 keeps the arena and zeroes it
after the reduction.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from typing import Any

from backends.zero.flat_unit import FlatUnit

MADV_DONTNEED = 4  # Linux: drop the pages now; the next touch maps a zeroed page
PAGE = mmap.PAGESIZE


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

    @property
    def wipes_in_place(self) -> bool:
        """Linux CPU: released memory is handed back with madvise and the arena keeps its address."""
        return LIBC is not None and self.flat.device.type == "cpu"

    def is_materialized(self) -> bool:
        return self.flat.untyped_storage().nbytes() > 0

    def acquire(self) -> None:
        """Give the arena memory if it has none. Wiping arenas start zero (and not resident); others hold
        no gradient yet and only their units' padding is written."""
        if self.is_materialized():
            return
        self.flat.untyped_storage().resize_(self.nbytes)
        self.allocations += 1
        if self.wipes_in_place:
            self._wipe()
            return
        for unit in self.units:
            unit.grad_full[unit.numel :].zero_()
            unit.grad_held = [False] * len(unit.params)

    def _hand_back(self, view: Any) -> tuple[int, int]:
        """madvise(MADV_DONTNEED) the whole pages inside `view`; the elements [head, tail) they covered."""
        size = view.element_size()
        begin = view.data_ptr()
        end = begin + view.numel() * size
        first, last = -(-begin // PAGE) * PAGE, end // PAGE * PAGE
        if last <= first:
            return 0, 0
        head, tail = (first - begin) // size, (last - begin) // size
        if LIBC.madvise(first, last - first, MADV_DONTNEED) != 0:  # refused: zero them by hand, still correct
            view[head:tail].zero_()
        return head, tail

    def _wipe(self) -> None:
        """Zero the whole arena, handing its pages back: every view then holds a zero gradient."""
        head, tail = self._hand_back(self.flat)
        self.flat[:head].zero_()  # the partial pages at either end (whole pages now read as zeros)
        self.flat[tail if tail > head else head :].zero_()
        for unit in self.units:
            unit.grad_held = [True] * len(unit.params)

    def discard(self, unit: FlatUnit) -> None:
        """Hand the pages wholly inside a reduced unit's view back to the system (Linux CPU; else nothing).

        Only whole pages strictly inside the view: a page shared with a neighbour, or with the allocator's
        header before the buffer, keeps its bytes. The unit's parameters drop their .grad views.
        """
        for param in unit.params:
            param.grad = None
        unit.grad_held = [False] * len(unit.params)
        if self.wipes_in_place and self.is_materialized():
            self._hand_back(unit.grad_full)

    def discard_unowned(self, unit: FlatUnit) -> None:
        """Hand back the whole pages of the unit's view outside this rank's owned slice (Linux CPU; else
        nothing): once the sum is in, only the slice is still read. Its .grad views stay until discard()."""
        if self.wipes_in_place and self.is_materialized():
            start, end = unit.owned_range
            self._hand_back(unit.grad_full[:start])
            self._hand_back(unit.grad_full[end:])

    def release(self) -> None:
        """After the reduction: the memory goes back (wiped in place, or the storage resized to zero); the
        parameters drop their .grad views until the next backward."""
        for unit in self.units:
            for param in unit.params:
                param.grad = None
        if self.wipes_in_place:
            self._wipe()
            return
        for unit in self.units:
            unit.grad_held = [False] * len(unit.params)
        self.flat.untyped_storage().resize_(0)
