"""Collectives on the data-parallel group, with a world-of-one path that needs no process group.

Reduce-scatter uses `reduce_scatter_tensor`. Older gloo builds lack it; there
we fall back to an all-reduce of the whole bucket followed by a slice (same
result, 2x the traffic) and say so once. nccl always has the real one.
"""

from __future__ import annotations

import warnings
from typing import Any, Optional


class _Done:
    """The handle of an operation that already finished (world of one)."""

    def wait(self) -> bool:
        return True


class _SliceAfter:
    """all_reduce handle that copies the local slice when waited on (the gloo fallback)."""

    def __init__(self, work: Any, full: Any, out: Any, start: int):
        self.work, self.full, self.out, self.start = work, full, out, start

    def wait(self) -> bool:
        self.work.wait()
        self.out.copy_(self.full[self.start:self.start + self.out.numel()])
        return True


class DataParallelComm:
    def __init__(self, group: Optional[Any] = None):
        import torch.distributed as dist

        self.dist = dist
        self.active = dist.is_available() and dist.is_initialized()
        self.group = group
        self.world = dist.get_world_size(group) if self.active else 1
        self.rank = dist.get_rank(group) if self.active else 0
        self._has_reduce_scatter = True

    def reduce_scatter(self, out: Any, full: Any) -> Any:
        """Sum `full` over ranks and leave this rank's 1/world slice in `out` (async handle)."""
        if self.world == 1:
            out.copy_(full)
            return _Done()
        if self._has_reduce_scatter:
            try:
                return self.dist.reduce_scatter_tensor(out, full, group=self.group, async_op=True)
            except (RuntimeError, NotImplementedError):
                self._has_reduce_scatter = False
                warnings.warn("this backend has no reduce_scatter; using all_reduce + slice", stacklevel=2)
        work = self.dist.all_reduce(full, group=self.group, async_op=True)
        return _SliceAfter(work, full, out, self.rank * out.numel())

    def all_reduce(self, tensor: Any, op: str = "sum") -> Any:
        if self.world == 1:
            return _Done()
        reduce_op = {"sum": self.dist.ReduceOp.SUM, "max": self.dist.ReduceOp.MAX}[op]
        return self.dist.all_reduce(tensor, op=reduce_op, group=self.group, async_op=True)

    def all_gather(self, full: Any, shard: Any) -> Any:
        """Concatenate every rank's `shard` into `full` (async handle)."""
        if self.world == 1:
            full.copy_(shard)
            return _Done()
        return self.dist.all_gather_into_tensor(full, shard, group=self.group, async_op=True)

    def barrier(self) -> None:
        if self.world > 1:
            self.dist.barrier(group=self.group)
