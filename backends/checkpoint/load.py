"""engine.load_checkpoint: newest intact checkpoint (or the tag asked for), in this run's layout.

A checkpoint saved under the same tp/pp layout and ZeRO units loads straight
into each rank's shards, at any data-parallel size (DCP reshards dp). Under
another tp/pp layout, ZeRO stage or bucket size every rank rebuilds its
shards from the units that hold its parameters (reshard.py).
Without a tag, a checkpoint that fails its manifest check is skipped with a
warning and the previous one is used; with an explicit tag it is an error.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from backends.checkpoint.layout import LATEST, committed_tags, read_json, verify
from backends.checkpoint.reshard import load_resharded, resume_state_for
from backends.checkpoint.shards import copy_back, key_prefix, layout_of, load_rng, sharded_views, unit_layout
from backends.ranks import dcp_quietly, distributed, rank
from planner.errors import UserInputError


def preferred_tags(load_dir: Path) -> list[str]:
    """Sealed tags in the order a resume tries them: the one `latest` names, then the others newest first."""
    candidates = committed_tags(load_dir)[::-1]
    latest = (load_dir / LATEST).read_text(encoding="utf-8").strip() if (load_dir / LATEST).is_file() else None
    if latest in candidates:
        candidates.remove(latest)
        candidates.insert(0, latest)
    return candidates


def choose_checkpoint(load_dir: Path, tag: str | None, *, report: bool = True) -> Path | None:
    """`tag`'s checkpoint, else the newest intact one (each passed over said on stderr unless `report` is False);
    None when there is none; a UserInputError when none is intact."""
    if tag is not None:
        reason = verify(load_dir / tag)
        if reason:
            raise UserInputError(
                f"checkpoint {load_dir / tag} is incomplete or corrupted: {reason}; "
                "load another tag, or start afresh with --no-resume"
            )
        return load_dir / tag
    candidates = preferred_tags(load_dir)
    for candidate in candidates:
        reason = verify(load_dir / candidate)
        if reason is None:
            return load_dir / candidate
        # A line for the user, not a Python warning: the run goes on from an older checkpoint.
        if report:
            print(f"checkpoint {load_dir / candidate} is unusable ({reason}); trying the previous one", file=sys.stderr)
    if candidates:
        raise UserInputError(
            f"no intact checkpoint in {load_dir}: every one failed its manifest check; "
            "start afresh with --no-resume (the checkpoints are kept)"
        )
    return None


def rank0_choice(error: str | None, choice: Path | None) -> tuple[str | None, Path | None]:
    """Rank 0's error or choice for everybody (the ranks must load the same tag, or all fail)."""
    import torch.distributed as dist

    if not distributed():
        return error, choice
    box = [error, str(choice) if choice else None]
    dist.broadcast_object_list(box, src=0)
    return box[0], Path(box[1]) if box[1] else None


def _same_shards(engine: Any, state: dict) -> bool:
    """This rank's shards are saved as it holds them: same tp/pp layout and ZeRO units (any dp size)."""
    saved, current = state["layout"], layout_of(engine)
    own = state["model_ranks"].get(key_prefix(engine))
    return (
        all(saved["dims"].get(key, 1) == current["dims"][key] for key in ("tp", "pp", "ep"))
        and own is not None
        and own["units"] == unit_layout(engine)
    )


def _everyone_same_shards(engine: Any, state: dict, choice: Path) -> bool:
    """True when every rank can load its shards directly; False: all ranks reshard (DCP loads collectively)."""
    import torch
    import torch.distributed as dist

    if "model_ranks" not in state:
        raise UserInputError(
            f"{choice} was written by an older version without per-stage state; "
            "start without resuming, or load its weights from a consolidated export"
        )
    same = torch.tensor([1 if _same_shards(engine, state) else 0], device=engine.device)
    if distributed():
        dist.all_reduce(same, op=dist.ReduceOp.MIN)
    return bool(same.item())


def load_checkpoint(engine: Any, load_dir: str | Path, *, tag: str | None = None) -> tuple[str | None, dict]:
    error: str | None = None
    choice = None
    if rank() == 0:
        try:
            choice = choose_checkpoint(Path(load_dir), tag)
        except UserInputError as failure:
            error = str(failure)
    error, choice = rank0_choice(error, choice)
    if error:
        raise UserInputError(error)
    if choice is None:
        return None, {}
    return str(choice), read_engine_state(engine, choice)


def read_engine_state(engine: Any, choice: Path) -> dict:
    """Collective: load the engine's shards, RNG and state from checkpoint folder `choice`; its client_state."""
    import torch.distributed.checkpoint as dcp

    state = read_json(choice / "engine_state.json")
    if "dims" not in state.get("layout", {}):
        raise UserInputError(
            f"{choice} was saved by an older version (its layout has no ParallelDims); "
            "start afresh with --no-resume, or load its weights from a consolidated export"
        )
    saved_ep, current_ep = state["layout"]["dims"].get("ep", 1), layout_of(engine)["dims"]["ep"]
    if saved_ep != current_ep and saved_ep > 1 and "expert_names" not in state.get("tensor_split", {}):
        raise UserInputError(
            f"{choice} was saved under expert parallelism ep {saved_ep} by a version that did not record its "
            f"expert tensors, and this run has ep {current_ep}; resume under ep {saved_ep}, or start from the "
            "run's consolidated weights (final/)"
        )
    if _everyone_same_shards(engine, state, choice):
        targets = sharded_views(engine)
        loaded = dict(targets)
        with dcp_quietly():
            dcp.load(loaded, checkpoint_id=str(choice / "shards"), no_dist=not distributed())
        copy_back(loaded, targets)
    else:
        load_resharded(engine, state, choice)
    engine.optimizer.publish_parameters()
    engine.restore_for_resume({**state, **resume_state_for(engine, state)})
    rng_file = choice / "rng" / f"rank{rank()}.pt"
    load_rng(rng_file if rng_file.is_file() else choice / "rng" / "rank0.pt")
    return state.get("client_state", {})
