"""What backends.initialize does before splitting a replicated model by expert or context parallelism.

Both splits keep the whole model on every rank of their group, so each rank fills the whole model (or moves
it to the GPU) before the split, and needs a job whose ranks the degree divides.
"""

from __future__ import annotations

from typing import Any

from planner.errors import UserInputError


def require_ranks(flag: str, degree: int, what: str) -> None:
    """One line unless torch.distributed runs a multiple of `degree` ranks."""
    import torch.distributed as dist

    world = dist.get_world_size() if dist.is_initialized() else 1
    if not dist.is_initialized() or world % degree:
        raise UserInputError(
            f"{flag} {degree} splits {what} over {degree} ranks but the job has {world}; "
            f"start it under torchrun with a multiple of {degree} ranks"
        )


def place_whole(model: Any, weights: Any, device: Any) -> None:
    """The whole model on this rank's device: read from the checkpoint, or moved there."""
    if weights is not None:
        from backends.runner.model_init import load_full

        load_full(model, weights, device)
    elif device.type == "cuda":
        model.cuda()
