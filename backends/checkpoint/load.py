"""engine.load_checkpoint: newest intact checkpoint (or the tag asked for), resharded to this world size.

Without a tag, a checkpoint that fails its manifest check is skipped with a
warning and the previous one is used; with an explicit tag it is an error.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Optional

from planner.errors import UserInputError

from .layout import LATEST, committed_tags, read_json, verify
from .shards import copy_back, load_rng, sharded_views, unit_layout


def _choose(load_dir: Path, tag: Optional[str]) -> Optional[Path]:
    if tag is not None:
        reason = verify(load_dir / tag)
        if reason:
            raise UserInputError(f"checkpoint {load_dir / tag} is incomplete or corrupted: {reason}; "
                                 "load another tag or start without --resume")
        return load_dir / tag
    candidates = committed_tags(load_dir)[::-1]
    latest = (load_dir / LATEST).read_text(encoding="utf-8").strip() if (load_dir / LATEST).is_file() else None
    if latest in candidates:
        candidates.remove(latest)
        candidates.insert(0, latest)
    for candidate in candidates:
        reason = verify(load_dir / candidate)
        if reason is None:
            return load_dir / candidate
        warnings.warn(f"checkpoint {load_dir / candidate} is unusable ({reason}); trying the previous one",
                      stacklevel=3)
    if candidates:
        raise UserInputError(f"no intact checkpoint in {load_dir}; every one failed its manifest check")
    return None


def _agree(choice: Optional[Path]) -> Optional[Path]:
    """Rank 0's choice for everybody (the ranks must load the same tag)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return choice
    box = [str(choice) if choice else None]
    dist.broadcast_object_list(box, src=0)
    return Path(box[0]) if box[0] else None


def load_checkpoint(engine: Any, load_dir: str | Path, *, tag: Optional[str] = None) -> tuple[Optional[str], dict]:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    distributed = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if distributed else 0
    error: Optional[str] = None
    choice = None
    if rank == 0:
        try:
            choice = _choose(Path(load_dir), tag)
        except UserInputError as failure:
            error = str(failure)
    if distributed:
        box = [error]
        dist.broadcast_object_list(box, src=0)
        error = box[0]
    if error:
        raise UserInputError(error)
    choice = _agree(choice)
    if choice is None:
        return None, {}
    state = read_json(choice / "engine_state.json")
    if state["units"] != unit_layout(engine):
        raise UserInputError(
            f"{choice} was saved with ZeRO stage {state['zero_stage']} and another bucket layout; load it with the "
            "same zero_optimization stage and reduce_bucket_size (any world size), or use the consolidated export"
        )
    targets = sharded_views(engine)
    loaded = dict(targets)
    dcp.load(loaded, checkpoint_id=str(choice / "shards"), no_dist=not distributed)
    copy_back(loaded, targets)
    engine.optimizer.publish_parameters()
    engine.restore_for_resume(state)
    own = choice / "rng" / f"rank{rank}.pt"
    load_rng(own if own.is_file() else choice / "rng" / "rank0.pt")
    return str(choice), state.get("client_state", {})
