"""engine.save_checkpoint: every rank writes its shards, rank 0 seals the folder (see layout.py).

engine_state.json holds what every rank shares (steps, data position) once,
the tp/pp layout, and, per model-parallel rank (keyed like the shards,
"pp<i>.tp<j>."), the state that differs between pipeline stages or tensor
ranks: the ZeRO unit layout, the loss scaler and the LR scheduler.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from backends.checkpoint.layout import commit
from backends.checkpoint.reshard import tensor_split_record
from backends.checkpoint.shards import key_prefix, layout_of, save_rng, sharded_views, unit_layout
from backends.ranks import barrier, dcp_quietly, distributed, everyones, rank

PER_RANK_KEYS = ("loss_scaler", "lr_scheduler", "skipped_steps")


def model_rank_state(engine: Any) -> dict[str, Any]:
    """What this rank must get back on resume beyond its shards: it may differ between stages."""
    shared = engine.state_for_resume()
    return {"units": unit_layout(engine), **{key: shared[key] for key in PER_RANK_KEYS}}


def gather_model_rank_states(engine: Any) -> dict[str, dict[str, Any]]:
    """key_prefix -> model_rank_state, from every rank (data-parallel peers hold the same and collapse)."""
    return dict(everyones((key_prefix(engine), model_rank_state(engine))))


def begin_folder(engine: Any, save_dir: Path, tag: str | None) -> tuple[str, Path]:
    """The tag and an empty .partial folder for it, made by rank 0 before any rank writes."""
    tag = tag or f"global_step{engine.global_steps}"
    return tag, begin_partial(save_dir, tag)


def begin_partial(save_dir: Path, tag: str) -> Path:
    """Collective: an empty `.partial-<tag>` folder, made by rank 0 before any rank writes (every checkpoint
    writer of the project: the engine, the runner, CheckpointManager)."""
    partial = save_dir / f".partial-{tag}"
    if rank() == 0:
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
    barrier()
    return partial


def write_resume_state(engine: Any, partial: Path, tag: str, client_state: dict | None) -> None:
    """Every rank's RNG file and rank 0's engine_state.json: the state as it is now (collective)."""
    save_rng(partial / "rng" / f"rank{rank()}.pt")
    model_ranks = gather_model_rank_states(engine)
    tensor_split = tensor_split_record(engine)
    if rank() == 0:
        shared = {key: value for key, value in engine.state_for_resume().items() if key not in PER_RANK_KEYS}
        state = {
            **shared,
            "tag": tag,
            "layout": layout_of(engine),
            "tensor_split": tensor_split,
            "model_ranks": model_ranks,
            "client_state": client_state or {},
        }
        (partial / "engine_state.json").write_text(json.dumps(state, indent=1), encoding="utf-8")


def seal(save_dir: Path, partial: Path, tag: str, keep_last: int) -> str:
    """Once every rank's files are written: rank 0 commits (manifest, rename, latest, pruning)."""
    barrier()
    if rank() == 0:
        commit(save_dir, partial, tag, keep_last)
    barrier()
    return str(save_dir / tag)


def write_engine_state(engine: Any, folder: Path, tag: str = "", client_state: dict | None = None) -> None:
    """Collective: every rank's shards, RNG and the engine state into `folder` (a .partial folder being sealed)."""
    import torch.distributed.checkpoint as dcp

    with dcp_quietly():
        dcp.save(sharded_views(engine), checkpoint_id=str(folder / "shards"), no_dist=not distributed())
    # The tag a folder is sealed under, not the .partial- name it is written in (engine_state.json said
    # ".partial-global_step20", an audit).
    write_resume_state(engine, folder, tag or folder.name.removeprefix(".partial-"), client_state)


def save_checkpoint(
    engine: Any, save_dir: str | Path, *, tag: str | None = None, client_state: dict | None = None
) -> str:
    save_dir = Path(save_dir)
    tag, partial = begin_folder(engine, save_dir, tag)
    write_engine_state(engine, partial, tag, client_state)
    return seal(save_dir, partial, tag, engine.config.hardware_selector.checkpoint.keep_last)
