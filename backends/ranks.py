"""Rank helpers for all of backends/ (their one home): rank, world size, barrier, gather.

Each has a world-of-one path, so code that also runs in a single process
(no process group) calls them without checking first.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from planner.errors import UserInputError


def distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if distributed() else 0


def world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if distributed() else 1


def barrier() -> None:
    import torch.distributed as dist

    if distributed():
        dist.barrier()


def everyones(value: Any) -> list[Any]:
    """Every rank's `value` (picklable), in rank order."""
    import torch.distributed as dist

    if not distributed():
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


@contextmanager
def dcp_quietly() -> Iterator[None]:
    """torch.distributed.checkpoint without its warning that it runs in one process (it is meant to, then)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def require_ranks(flag: str, degree: int, what: str) -> None:
    """One line unless torch.distributed runs a multiple of `degree` ranks."""
    import torch.distributed as dist

    world = dist.get_world_size() if dist.is_initialized() else 1
    if not dist.is_initialized() or world % degree:
        raise UserInputError(
            f"{flag} {degree} splits {what} over {degree} ranks but the job has {world}; "
            f"start it under torchrun with a multiple of {degree} ranks"
        )
