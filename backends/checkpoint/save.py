"""engine.save_checkpoint: every rank writes its shards, rank 0 seals the folder (see layout.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Optional

from .layout import commit
from .shards import key_prefix, save_rng, sharded_views, unit_layout


def _rank_and_barrier() -> tuple[int, Any]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.barrier
    return 0, lambda: None


def save_checkpoint(engine: Any, save_dir: str | Path, *, tag: Optional[str] = None,
                    client_state: Optional[dict] = None) -> str:
    import torch.distributed.checkpoint as dcp

    save_dir = Path(save_dir)
    tag = tag or f"global_step{engine.global_steps}"
    rank, barrier = _rank_and_barrier()
    partial = save_dir / f".partial-{tag}"
    if rank == 0:
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
    barrier()
    dcp.save(sharded_views(engine), checkpoint_id=str(partial / "shards"), no_dist=not _distributed())
    save_rng(partial / "rng" / f"rank{rank}.pt")
    if rank == 0:
        state = {**engine.state_for_resume(), "tag": tag, "units": unit_layout(engine),
                 "key_prefix_example": key_prefix(engine), "client_state": client_state or {}}
        (partial / "engine_state.json").write_text(json.dumps(state, indent=1), encoding="utf-8")
    barrier()
    if rank == 0:
        commit(save_dir, partial, tag, engine.config.hardware_selector.checkpoint.keep_last)
    barrier()
    return str(save_dir / tag)


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()
