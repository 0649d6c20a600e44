"""The sharded state of an engine as torch.distributed.checkpoint sees it, and per-rank RNG state.

Each ZeRO unit contributes one entry per flat state (master weights,
exp_avg, exp_avg_sq, ...): a DTensor sharded on dim 0 over the data-parallel
mesh, with the unit's unpadded length as its global shape. Our padded layout
(rank r owns [r*c, (r+1)*c)) is exactly torch's Shard(0) chunking, so DCP can
reshard a checkpoint saved at one world size into another.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any


def _mesh(engine: Any) -> Any:
    if engine.comm.world == 1:
        return None
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    return DeviceMesh.from_group(engine.comm.group or dist.group.WORLD, engine.device.type)


def key_prefix(engine: Any) -> str:
    """Keys of different tensor/pipeline ranks must not collide: they hold different tensors."""
    model, expert_parallel = engine.parallel_model, getattr(engine, "expert_parallel", None)
    ep = f"ep{expert_parallel.ep_rank}." if expert_parallel is not None else ""  # each ep rank holds other experts
    return ep if model is None else f"pp{model.groups.pp_rank}.tp{model.groups.tp_rank}.{ep}"


def layout_of(engine: Any) -> dict[str, Any]:
    """The parallel layout a checkpoint was saved under (recorded in engine_state.json)."""
    model = engine.parallel_model
    if model is None:
        from planner.contract.layout import ParallelDims

        ep = engine.ep if hasattr(engine, "ep") else 1
        dims = ParallelDims(dp=engine.comm.world * ep, ep=ep)
        return {"dims": dims.model_dump(mode="json"), "sequence_parallel": False}
    from backends.checkpoint.parallel_weights import layout_record

    return layout_record(model)


def unit_layout(engine: Any) -> list[dict[str, Any]]:
    return [
        {"names": unit.names, "numel": unit.numel, "shapes": [list(param.shape) for param in unit.params]}
        for unit in engine.optimizer.units
    ]


def sharded_views(engine: Any) -> dict[str, Any]:
    """Key -> tensor that aliases the engine's own storage (so loading writes straight into it)."""
    from torch.distributed.tensor import DTensor, Shard

    optimizer = engine.optimizer
    optimizer.ensure_optimizer_state()
    mesh, prefix, views = _mesh(engine), key_prefix(engine), {}
    for name, flat in optimizer.flat_states().items():
        for unit in optimizer.units:
            local = flat[unit.shard_start : unit.shard_start + unit.owned_real]
            key = f"{prefix}unit{unit.index}.{name}"
            if mesh is None or not unit.partitioned:
                views[key] = local
            else:
                views[key] = DTensor.from_local(local, mesh, [Shard(0)], shape=(unit.numel,), stride=(1,))
    for name, value in optimizer.scalar_states().items():
        views[f"{prefix}optimizer.{name}"] = value
    return views


def copy_back(loaded: dict[str, Any], targets: dict[str, Any]) -> None:
    """DCP loads in place; copy anyway where a value came back as a new tensor."""
    from torch.distributed.tensor import DTensor

    for key, target in targets.items():
        value = loaded[key]
        value = value.to_local() if isinstance(value, DTensor) else value
        destination = target.to_local() if isinstance(target, DTensor) else target
        if value.data_ptr() != destination.data_ptr():
            destination.copy_(value)


def save_rng(path: Path) -> None:
    import numpy
    import torch

    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    numpy_state = numpy.random.get_state()
    state["numpy"] = (numpy_state[0], torch.from_numpy(numpy_state[1].copy()), *numpy_state[2:])
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)


def load_rng(path: Path) -> None:
    import numpy
    import torch

    state = torch.load(path, weights_only=True)
    torch.set_rng_state(state["torch"])
    version, keys, gauss = state["python"]
    random.setstate((version, tuple(keys), gauss))
    kind, keys, position, has_gauss, cached = state["numpy"]
    numpy.random.set_state((kind, keys.numpy(), position, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
