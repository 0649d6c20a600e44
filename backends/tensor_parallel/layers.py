"""Column- and row-parallel linears and a vocab-parallel embedding.

They replace the HF modules in place and keep their parameter names
(`weight`, `bias`) and orientation (nn.Linear stores [out, in], GPT-2's
Conv1D stores [in, out]) so that state dicts map 1:1 to the unsharded
model. `shard_spec` says along which dim each parameter is split, and into
how many equal sections first (3 for GPT-2's fused q|k|v projection), which
is all that checkpoint resharding needs.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from backends.tensor_parallel.collectives import copy_to_tp, reduce_from_tp, reduce_scatter_sequence


def shard_tensor(full: torch.Tensor, dim: int, rank: int, size: int, sections: int = 1) -> torch.Tensor:
    """This rank's part of `full`: each of `sections` equal blocks along `dim` is split `size` ways."""
    blocks = full.chunk(sections, dim=dim)
    if any(block.shape[dim] % size for block in blocks) or full.shape[dim] % sections:
        raise ValueError(f"dimension {full.shape[dim]} does not split into {sections} x {size} equal parts")
    return torch.cat([block.chunk(size, dim=dim)[rank] for block in blocks], dim=dim).clone()


def pad_rows(full: torch.Tensor, rows: int) -> torch.Tensor:
    """`full` with zero rows appended up to `rows` (a vocabulary padded to a multiple of tp)."""
    if full.shape[0] >= rows:
        return full
    return torch.cat([full, full.new_zeros((rows - full.shape[0], *full.shape[1:]))])


def padded_vocab(vocab: int, size: int) -> int:
    return -(-vocab // size) * size


def unshard_tensor(parts: list[torch.Tensor], dim: int, sections: int = 1) -> torch.Tensor:
    """Inverse of shard_tensor over all ranks' parts (in rank order)."""
    per_rank = [part.chunk(sections, dim=dim) for part in parts]
    return torch.cat([per_rank[rank][section] for section in range(sections) for rank in range(len(parts))], dim=dim)


class _ParallelLinear(nn.Module):
    def __init__(
        self,
        source: nn.Module,
        group,
        *,
        sections: int,
        sequence_parallel: bool,
        column: bool,
        pad_outputs_to: int = 0,
        shard: tuple[int, int] | None = None,
    ):
        super().__init__()
        self.group = group
        self.sequence_parallel = sequence_parallel
        self.transposed = not isinstance(source, nn.Linear)  # HF Conv1D: weight is [in, out]
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        # shard=(index, count) with count < size: `size // count` ranks hold the same part (replicated
        # key/value heads when tp exceeds them).
        self.replicas = size // shard[1] if shard else 1
        rank, size = shard if shard else (rank, size)
        out_dim = 1 if self.transposed else 0
        weight_dim = out_dim if column else 1 - out_dim
        self.shard_spec = {"weight": (weight_dim, sections)}
        weight = source.weight.detach()
        bias = getattr(source, "bias", None)
        if pad_outputs_to:  # a vocabulary that tp does not divide: zero rows, masked out of the loss
            weight = pad_rows(weight.transpose(0, 1) if self.transposed else weight, pad_outputs_to)
            weight = weight.transpose(0, 1) if self.transposed else weight
            bias = None if bias is None else nn.Parameter(pad_rows(bias.detach(), pad_outputs_to))
        self.weight = nn.Parameter(shard_tensor(weight, weight_dim, rank, size, sections))
        if bias is None:
            self.bias = None
        elif column:
            self.shard_spec["bias"] = (0, sections)
            self.bias = nn.Parameter(shard_tensor(bias.detach(), 0, rank, size, sections))
        else:
            self.bias = nn.Parameter(bias.detach().clone())  # replicated: added once, after the reduction

    def _matmul(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if not self.transposed:
            return F.linear(x, self.weight, bias)
        shape = x.shape[:-1] + (self.weight.shape[1],)
        flat = x.reshape(-1, x.shape[-1])
        out = torch.addmm(bias, flat, self.weight) if bias is not None else flat @ self.weight
        return out.view(shape)


class ColumnParallelLinear(_ParallelLinear):
    """Output features split across TP ranks; the input is the full activation."""

    def __init__(
        self,
        source: nn.Module,
        group,
        *,
        sections: int = 1,
        sequence_parallel: bool = False,
        pad_outputs_to: int = 0,
        shard: tuple[int, int] | None = None,
    ):
        super().__init__(
            source,
            group,
            sections=sections,
            sequence_parallel=sequence_parallel,
            column=True,
            pad_outputs_to=pad_outputs_to,
            shard=shard,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Under sequence parallelism the input was all-gathered by the norm before
        # us, whose backward already reduce-scatters the gradient.
        if not self.sequence_parallel:
            x = copy_to_tp(x, self.group)
        return self._matmul(x, self.bias)


class RowParallelLinear(_ParallelLinear):
    """Input features split across TP ranks; partial outputs are summed (or reduce-scattered under SP)."""

    def __init__(self, source: nn.Module, group, *, sequence_parallel: bool = False):
        super().__init__(source, group, sections=1, sequence_parallel=sequence_parallel, column=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        partial = self._matmul(x, None)
        if self.sequence_parallel:
            out = reduce_scatter_sequence(partial, self.group)
        else:
            out = reduce_from_tp(partial, self.group)
        return out + self.bias if self.bias is not None else out


class VocabParallelEmbedding(nn.Module):
    """Rows of the vocabulary split across TP ranks; each rank looks up its own ids, then sum.

    A vocabulary that tp does not divide (GPT-2's 50257) is padded with zero rows to the next multiple,
    as Megatron does; no id maps there and the loss masks those logits."""

    def __init__(self, source: nn.Embedding, group):
        super().__init__()
        self.group = group
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        vocab = padded_vocab(source.weight.shape[0], size)
        self.vocab_start = rank * (vocab // size)
        self.vocab_end = self.vocab_start + vocab // size
        self.shard_spec = {"weight": (0, 1)}
        self.weight = nn.Parameter(shard_tensor(pad_rows(source.weight.detach(), vocab), 0, rank, size))
        padding = source.padding_idx
        self.padding_idx = (
            padding - self.vocab_start if padding is not None and self.vocab_start <= padding < self.vocab_end else None
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        outside = (input_ids < self.vocab_start) | (input_ids >= self.vocab_end)
        local_ids = (input_ids - self.vocab_start).masked_fill(outside, 0)
        rows = F.embedding(local_ids, self.weight, self.padding_idx)
        rows = rows.masked_fill(outside.unsqueeze(-1), 0.0)
        return reduce_from_tp(rows, self.group)
