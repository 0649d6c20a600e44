"""The four Megatron-style communication steps of tensor and sequence parallelism.

Each is an autograd function whose backward is the conjugate collective, so
that gradients of a sharded model come out equal to the unsharded model's.
Sequence-parallel activations are split along dim -2 (the sequence) of a
3-D [batch, seq, hidden] tensor; a 2-D [tokens, hidden] tensor (OPT flattens
before its MLP) is split along dim 0, where order does not matter because
every consumer of it works token by token.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _split_dim(tensor: torch.Tensor) -> int:
    return tensor.dim() - 2 if tensor.dim() >= 3 else 0


def _all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    if dist.get_world_size(group) == 1:
        return tensor
    tensor = tensor.contiguous()
    dist.all_reduce(tensor, group=group)
    return tensor


def _all_gather(tensor: torch.Tensor, group) -> torch.Tensor:
    size = dist.get_world_size(group)
    if size == 1:
        return tensor
    dim = _split_dim(tensor)
    parts = [torch.empty_like(tensor) for _ in range(size)]
    dist.all_gather(parts, tensor.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


def _sequence_chunks(tensor: torch.Tensor, size: int) -> list[torch.Tensor]:
    dim = _split_dim(tensor)
    if tensor.shape[dim] % size:
        from planner.errors import UserInputError

        raise UserInputError(
            f"sequence length {tensor.shape[dim]} is not divisible by tensor parallelism {size}; "
            "use a seq_len that is a multiple of tp, or turn sequence parallelism off"
        )
    return [chunk.contiguous() for chunk in tensor.chunk(size, dim=dim)]


def _reduce_scatter(tensor: torch.Tensor, group) -> torch.Tensor:
    size = dist.get_world_size(group)
    if size == 1:
        return tensor
    chunks = _sequence_chunks(tensor, size)
    out = torch.empty_like(chunks[0])
    dist.reduce_scatter(out, chunks, group=group)
    return out


def _local_chunk(tensor: torch.Tensor, group) -> torch.Tensor:
    size = dist.get_world_size(group)
    return tensor if size == 1 else _sequence_chunks(tensor, size)[dist.get_rank(group)]


def _collective(name: str, forward, backward):
    """An autograd function running `forward(tensor, group)` and, in backward, `backward(grad, group)`."""

    def forward_(ctx, tensor, group):
        ctx.group = group
        return forward(tensor, group)

    def backward_(ctx, grad):
        return backward(grad, ctx.group), None

    function = type(
        name, (torch.autograd.Function,), {"forward": staticmethod(forward_), "backward": staticmethod(backward_)}
    )
    return function.apply


def _identity(tensor: torch.Tensor, group) -> torch.Tensor:
    return tensor.view_as(tensor)


def _all_reduce_copy(tensor: torch.Tensor, group) -> torch.Tensor:
    return _all_reduce(tensor.clone(), group)


# Input of a column-parallel layer: identity forward; all-reduce backward.
copy_to_tp = _collective("CopyToTensorParallel", _identity, _all_reduce_copy)
# Output of a row-parallel layer: all-reduce forward; identity backward.
reduce_from_tp = _collective("ReduceFromTensorParallel", _all_reduce_copy, _identity)
# Sequence shards to the full sequence (before column projections under SP).
gather_sequence = _collective("GatherSequence", _all_gather, _reduce_scatter)
# Row-parallel output onto sequence shards under SP.
reduce_scatter_sequence = _collective("ReduceScatterSequence", _reduce_scatter, _all_gather)
# Entering the sequence-parallel region: keep this rank's shard.
scatter_sequence = _collective("ScatterSequence", _local_chunk, _all_gather)
