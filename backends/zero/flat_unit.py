"""A FlatUnit: a group of parameters laid end to end in one padded, contiguous buffer.

The buffer's length is a multiple of the data-parallel world size; rank r owns
elements [r*shard, (r+1)*shard). That slice is the unit's piece of the fp32
master weights, of the optimizer states and of the reduced gradients. Units
are the grain of every collective: a gradient bucket for ZeRO-1/2, a module
(one transformer block, or the "root" of everything else) for ZeRO-3.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backends.decoder_anatomy import repeated_blocks


@dataclass
class FlatUnit:
    index: int
    names: list[str]
    params: list[Any]
    world: int
    rank: int
    partitioned: bool = True  # False: ZeRO-0, every rank owns the whole unit
    offsets: list[int] = field(default_factory=list)
    numel: int = 0
    padded: int = 0
    shard: int = 0
    shard_start: int = 0  # offset of this unit's slice in the rank's flat master
    full: Any = None  # the compute-dtype buffer the parameters view (freed between uses in ZeRO-3)
    local: Any = None  # this rank's compute-dtype slice (ZeRO-3 keeps only this)
    master: Any = None  # view into the optimizer's flat fp32 master
    grad: Any = None  # view into the flat fp32 reduced-gradient shard
    grad_full: Any = None  # stages 0-2: the bucket's full local gradients, which .grad views
    grad_held: list = field(default_factory=list)  # stages 0-2: per parameter, grad_full holds its gradient
    ready: int = 0  # parameters whose gradient arrived in the current backward
    launched: bool = False

    def __post_init__(self) -> None:
        position = 0
        for param in self.params:
            self.offsets.append(position)
            position += param.numel()
        self.numel = position
        owners = self.world if self.partitioned else 1
        self.padded = -(-position // owners) * owners
        self.shard = self.padded // owners

    @property
    def owned_range(self) -> tuple[int, int]:
        """This rank's [start, end) in the unit's flat buffer."""
        start = self.rank * self.shard if self.partitioned else 0
        return start, start + self.shard

    @property
    def owned_real(self) -> int:
        """How many of the owned elements are parameters, not padding."""
        start, end = self.owned_range
        return max(0, min(end, self.numel) - start)

    def flatten(self, tensors: list[Any], dtype: Any) -> Any:
        """The padded flat concatenation of one tensor per parameter (None -> zeros)."""
        import torch

        flat = torch.empty(self.padded, dtype=dtype, device=self.params[0].device)
        flat[self.numel :].zero_()
        for tensor, offset, param in zip(tensors, self.offsets, self.params):
            piece = flat[offset : offset + param.numel()]
            if tensor is None:
                piece.zero_()
            else:
                piece.copy_(tensor.reshape(-1))
        return flat

    def attach(self, full: Any) -> None:
        """Make every parameter a view of `full` (which must hold the unit's padded values)."""
        self.full = full
        for param, offset in zip(self.params, self.offsets):
            param.data = full[offset : offset + param.numel()].view(param.shape)

    def is_materialized(self) -> bool:
        return self.full.untyped_storage().nbytes() > 0

    def free_full(self) -> None:
        """Release the gathered buffer's memory; the parameter views stay, pointing at no bytes."""
        self.full.untyped_storage().resize_(0)

    def allocate_full(self) -> None:
        self.full.untyped_storage().resize_(self.full.numel() * self.full.element_size())


def group_parameters(model: Any, bucket_elements: int) -> list[list[tuple[str, Any]]]:
    """Trainable parameters (tied ones once) in module order, cut into buckets of about `bucket_elements`."""
    groups: list[list[tuple[str, Any]]] = [[]]
    size = 0
    for name, param in model.named_parameters():  # named_parameters already skips tied duplicates
        if not param.requires_grad:
            continue
        if groups[-1] and size + param.numel() > bucket_elements:
            groups.append([])
            size = 0
        groups[-1].append((name, param))
        size += param.numel()
    return [group for group in groups if group]


def group_by_block(model: Any) -> list[tuple[Any, list[tuple[str, Any]]]]:
    """ZeRO-3 units as (block, parameters): one per transformer block, then (None, every other parameter)."""
    blocks = repeated_blocks(model)
    owner = {}
    for block_index, block in enumerate(blocks):
        for param in block.parameters():
            owner.setdefault(id(param), block_index)
    groups: list[list[tuple[str, Any]]] = [[] for _ in blocks] + [[]]
    for name, param in model.named_parameters():
        if param.requires_grad:
            groups[owner.get(id(param), len(blocks))].append((name, param))
    return [(module, group) for module, group in zip([*blocks, None], groups) if group]
