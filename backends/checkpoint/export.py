"""Export the engine's fp32 master weights as one consolidated, HF-named safetensors file (rank 0 writes).

Under tensor/pipeline parallelism each rank's masters are its stage's
shards; backends.checkpoint.parallel_weights gathers them into full HF tensors. A
tied embedding is written once (HF's save_pretrained drops the head's alias,
and from_pretrained ties it back).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def master_weights(engine: Any) -> dict[str, Any]:
    """Parameter name (as the engine's module names it) -> this rank's fp32 master, gathered over dp."""
    import torch

    state = {}
    for unit in engine.optimizer.units:
        full = torch.empty(unit.padded, dtype=torch.float32, device=unit.master.device)
        if unit.partitioned:
            engine.optimizer._wait([engine.comm.all_gather(full, unit.master.contiguous())])
        else:
            full.copy_(unit.master)
        for name, param, offset in zip(unit.names, unit.params, unit.offsets):
            state[name] = full[offset : offset + param.numel()].view(param.shape).clone()
    return state


def consolidated_state_dict(engine: Any) -> dict[str, Any]:
    """HF name -> full fp32 tensor, on every rank (under tp/pp a tied head is listed under both names)."""
    masters = master_weights(engine)
    if engine.parallel_model is not None:  # (its experts gathered over ep too)
        from backends.checkpoint.parallel_weights import gather_full_state_dict

        return gather_full_state_dict(engine.parallel_model, masters)
    if getattr(engine, "expert_parallel", None) is not None:
        return engine.expert_parallel.full_state(masters)  # every rank's experts
    return masters


def export_safetensors(engine: Any, path: str | Path) -> str | None:
    from backends.checkpoint.parallel_weights import save_consolidated, write_safetensors

    if engine.parallel_model is not None:
        save_consolidated(engine.parallel_model, path, master_weights(engine))
    else:
        state = consolidated_state_dict(engine)
        if engine.monitor.rank == 0:
            write_safetensors(path, state, {"format": "pt"})
    return str(path) if engine.monitor.rank == 0 else None
