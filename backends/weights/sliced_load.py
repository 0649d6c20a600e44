"""Fill a tensor/pipeline-parallel model, built on the meta device, with only this rank's slices of a checkpoint.

After `parallelize`, a rank holds the layers of its pipeline stage, each
TP-sharded tensor as its part of `sections` equal blocks along one dim (3
for GPT-2's fused q|k|v), a vocabulary padded to a multiple of tp, and
under expert parallelism its run of each layer's experts.
This reads exactly those rows or columns from the safetensors files (the
inverse of tensor_parallel.layers.shard_tensor), zero-filling the padding.
The full shapes are checked against the checkpoint first, so a checkpoint of
another model is one line, not a silent mis-slice.
"""

from __future__ import annotations

from typing import Any

from backends.weights.model_init import materialize
from planner.errors import UserInputError


def _experts_split(parallel_model: Any, name: str) -> tuple[int, int]:
    """(ep, ep rank) for an expert tensor split over ep (its experts along dim 0), else (1, 0)."""
    expert_parallel = parallel_model.expert_parallel
    if expert_parallel is not None and name in expert_parallel.expert_names:
        return expert_parallel.ep, expert_parallel.ep_rank
    return 1, 0


def _full_shape(parallel_model: Any, name: str, local_shape: tuple[int, ...], tp: int) -> tuple[int, ...]:
    full = list(local_shape)
    full[0] *= _experts_split(parallel_model, name)[0]
    spec = parallel_model.shard_specs.get(name)
    if spec is None:
        return tuple(full)
    dim = spec[0]
    count = tp // parallel_model.tp_replicas.get(name, 1)
    full[dim] *= count
    if name in parallel_model.padded_rows:
        full[dim] = parallel_model.padded_rows[name]
    return tuple(full)


def slice_index(parallel_model: Any, name: str, full_shape: tuple[int, ...]) -> list[tuple[slice, ...]]:
    """The slices of the full tensor this rank holds, one per section, along the shard dim."""
    groups = parallel_model.groups
    dim, sections = parallel_model.shard_specs[name]
    replicas = parallel_model.tp_replicas.get(name, 1)
    count, index = groups.dims.tp // replicas, groups.tp_rank // replicas
    length = full_shape[dim]
    if name in parallel_model.padded_rows:
        length = -(-length // groups.dims.tp) * groups.dims.tp  # padded to a multiple of tp
    section = length // sections
    part = section // count
    ep, ep_rank = _experts_split(parallel_model, name)
    experts = full_shape[0] // ep
    pieces = []
    for number in range(sections):
        start = number * section + index * part
        selector = [slice(None)] * len(full_shape)
        if ep > 1:  # this rank's run of experts
            selector[0] = slice(ep_rank * experts, (ep_rank + 1) * experts)
        selector[dim] = slice(start, start + part)
        pieces.append(tuple(selector))
    return pieces


def read_local_slice(parallel_model: Any, source: Any, name: str) -> Any:
    """This rank's part of checkpoint tensor `name`: its sections' rows or columns, padding rows zero-filled."""
    import torch

    full_shape = source.shape(name)
    dim = parallel_model.shard_specs[name][0]
    parts = []
    for selector in slice_index(parallel_model, name, full_shape):
        wanted = selector[dim]
        stop = min(wanted.stop, full_shape[dim])
        real = list(selector)
        real[dim] = slice(min(wanted.start, stop), stop)
        piece = source.read(name, tuple(real))
        missing = (wanted.stop - wanted.start) - piece.shape[dim]
        if missing > 0:  # vocabulary padding: zero rows no token id maps to
            pad_shape = list(piece.shape)
            pad_shape[dim] = missing
            piece = torch.cat([piece, piece.new_zeros(pad_shape)], dim=dim)
        parts.append(piece)
    return torch.cat(parts, dim=dim)


def load_parallel_slices(parallel_model: Any, source: Any, device: Any) -> None:
    import torch

    module = parallel_model.module
    tp = parallel_model.groups.dims.tp
    shapes = {name: tuple(param.shape) for name, param in module.named_parameters()}
    for name, local_shape in shapes.items():
        expected = _full_shape(parallel_model, name, local_shape, tp)
        found = source.shape(name)
        if tuple(found) != tuple(expected):
            raise UserInputError(
                f"checkpoint tensor '{source.key_for(name)}' in {source.folder} has shape {list(found)} "
                f"but the config gives {list(expected)}; the weights do not match config.json"
            )
    materialize(module, device)
    with torch.no_grad():
        for name, param in module.named_parameters():
            ep, ep_rank = _experts_split(parallel_model, name)
            if name in parallel_model.shard_specs:
                value = read_local_slice(parallel_model, source, name)  # (this rank's experts among them)
            elif ep > 1:  # this rank's run of experts, whole (no tp)
                experts = param.shape[0]
                value = source.read(name, (slice(ep_rank * experts, (ep_rank + 1) * experts),))
            else:
                value = source.read(name)
            param.copy_(value.to(device=param.device, dtype=param.dtype))
