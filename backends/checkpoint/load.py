"""engine.load_checkpoint: newest intact checkpoint (or the tag asked for), resharded to this data-parallel size.

The tensor/pipeline layout must be the one the checkpoint was saved under
(ZeRO's flat buffers follow each stage's parameters); otherwise every rank
raises the same one-line error naming both layouts and the consolidated
export as the way across.

Without a tag, a checkpoint that fails its manifest check is skipped with a
warning and the previous one is used; with an explicit tag it is an error.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Optional

from planner.errors import UserInputError

from .layout import LATEST, committed_tags, read_json, verify
from .shards import copy_back, key_prefix, layout_of, load_rng, sharded_views, unit_layout


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


def _mismatch(engine: Any, state: dict, choice: Path) -> Optional[str]:
    """Why this rank cannot take its part of the checkpoint, or None."""
    saved, current = state["layout"], layout_of(engine)
    shape = ("tensor_parallel", "pipeline_parallel")
    if any(saved[key] != current[key] for key in shape):
        return (f"{choice} was saved under tp {saved['tensor_parallel']} x pp {saved['pipeline_parallel']} and this "
                f"run is tp {current['tensor_parallel']} x pp {current['pipeline_parallel']}; ZeRO optimizer state "
                "does not move between tp/pp layouts: resume with the saved tp and pp (any data-parallel size), or "
                "carry the weights over with engine.export_consolidated and parallel_checkpoint.load_consolidated")
    own = state["model_ranks"].get(key_prefix(engine))
    if own is None or own["units"] != unit_layout(engine):
        return (f"{choice} was saved with ZeRO stage {state['zero_stage']} and another bucket layout; load it with the "
                "same zero_optimization stage and reduce_bucket_size (any world size), or use the consolidated export")
    return None


def _own_state(engine: Any, state: dict, choice: Path) -> dict:
    """This rank's entry of state["model_ranks"]; every rank raises the same error if any rank cannot load."""
    import torch.distributed as dist

    if "model_ranks" not in state:
        raise UserInputError(f"{choice} was written by an older version without per-stage state; "
                             "start without resuming, or load its weights from a consolidated export")
    reasons = [_mismatch(engine, state, choice)]
    if dist.is_available() and dist.is_initialized():
        everyone: list[Optional[str]] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, reasons[0])
        reasons = everyone
    reason = next((r for r in reasons if r), None)
    if reason:
        raise UserInputError(reason)
    return state["model_ranks"][key_prefix(engine)]


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
    own = _own_state(engine, state, choice)
    targets = sharded_views(engine)
    loaded = dict(targets)
    dcp.load(loaded, checkpoint_id=str(choice / "shards"), no_dist=not distributed)
    copy_back(loaded, targets)
    engine.optimizer.publish_parameters()
    engine.restore_for_resume({**state, **own})
    rng_file = choice / "rng" / f"rank{rank}.pt"
    load_rng(rng_file if rng_file.is_file() else choice / "rng" / "rank0.pt")
    return str(choice), state.get("client_state", {})
