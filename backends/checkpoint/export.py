"""Export the engine's fp32 master weights as one consolidated, HF-named safetensors file (rank 0 writes)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional


def consolidated_state_dict(engine: Any) -> dict[str, Any]:
    """Parameter name -> full fp32 tensor, on every rank (gathers each unit's master shards)."""
    import torch

    if engine.parallel_model is not None:
        raise NotImplementedError("consolidated export of tensor/pipeline-parallel runs is not supported yet")
    state = {}
    for unit in engine.optimizer.units:
        full = torch.empty(unit.padded, dtype=torch.float32, device=unit.master.device)
        if unit.partitioned:
            engine.optimizer._wait([engine.comm.all_gather(full, unit.master.contiguous())])
        else:
            full.copy_(unit.master)
        for name, param, offset in zip(unit.names, unit.params, unit.offsets):
            state[name] = full[offset:offset + param.numel()].view(param.shape).clone()
    return state


def export_safetensors(engine: Any, path: str | Path) -> Optional[str]:
    from safetensors.torch import save_file

    state = consolidated_state_dict(engine)
    if engine.monitor.rank != 0:
        return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    save_file({name: tensor.contiguous() for name, tensor in state.items()}, str(temporary), metadata={"format": "pt"})
    os.replace(temporary, path)
    return str(path)
