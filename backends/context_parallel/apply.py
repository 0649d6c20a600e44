"""Context parallelism in the engine: the groups, and the forward that splits each micro-batch.

Alone, the cp ranks of one replica are consecutive (cp innermost); with tensor parallelism each cp rank
is a tp group (backends/parallel_dims.py) and ParallelModel takes the same split (backends/parallelize.py).
Every parameter is replicated over the cp ranks, so the engine's ZeRO runs on all the ranks at once (any stage): each cp rank's loss is its
tokens' summed loss over the micro-batch's token count, times cp, and ZeRO's mean over dp x cp ranks is
then the mean over the dp replicas of their micro-batches' loss, the single-process gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from backends.context_parallel.attention import NAME, ContextParallelAttention, register
from backends.context_parallel.sharding import shifted_labels


def summed_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The micro-batch's summed next-token loss over this rank's positions, on an fp32 copy as transformers'."""
    return torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100, reduction="sum"
    )


@dataclass
class ContextParallel:
    cp: int
    cp_rank: int
    attention: ContextParallelAttention
    token_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = summed_token_loss  # compiled under compile

    def split(self, input_ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(this rank's token ids, their true positions (1, n), their next-token targets, the micro-batch's
        counted targets) for one micro-batch; the attention learns every rank's positions."""
        seq_len = input_ids.shape[1]
        if seq_len % (2 * self.cp):
            from planner.errors import UserInputError

            raise UserInputError(
                f"layout.cp {self.cp} splits each sequence into {2 * self.cp} chunks; this batch's sequences have "
                f"{seq_len} tokens, not a multiple of {2 * self.cp}"
            )
        local = self.attention.set_split(seq_len, self.cp_rank, input_ids.device)
        targets = shifted_labels(labels)
        counted = torch.clamp((targets != -100).sum(), min=1)
        return input_ids[:, local], local[None, :], targets[:, local], counted

    def forward(self, model: Any, input_ids: torch.Tensor, labels: torch.Tensor) -> Any:
        """This rank's share of the loss (see the module docstring), as an output with .loss and .logits."""
        ids, positions, targets, counted = self.split(input_ids, labels)
        logits = model(input_ids=ids, position_ids=positions.expand(ids.shape[0], -1)).logits
        summed = self.token_loss(logits, targets)
        return SimpleNamespace(loss=summed / counted * self.cp, logits=logits)

    def mean_over_ranks(self, share: torch.Tensor) -> float:
        """The micro-batch's mean token loss from this rank's share (collective over the cp group)."""
        import torch.distributed as dist

        mean = share.detach().reshape(1) / self.cp
        dist.all_reduce(mean, group=self.attention.group)
        return float(mean.item())

    def eval_loss(self, model: Any, input_ids: torch.Tensor, labels: torch.Tensor) -> float:
        """The micro-batch's mean token loss (collective over the cp group)."""
        return self.mean_over_ranks(self.forward(model, input_ids, labels).loss)


def context_parallel_on(model: Any, group: Any, cp: int, cp_rank: int) -> ContextParallel:
    """Point the model's attention at the cp implementation over `group` (this rank is cp_rank of cp)."""
    attention = ContextParallelAttention(group, cp)
    register(attention)
    model.config._attn_implementation = NAME
    for module in model.modules():
        if hasattr(module, "config") and module is not model:
            module.config._attn_implementation = NAME
    return ContextParallel(cp, cp_rank, attention)


def apply_context_parallel(model: Any, cp: int, device_type: str = "cpu") -> ContextParallel:
    """Point the model's attention at the cp implementation and build the cp groups (collective)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    if world % cp:
        raise ValueError(f"cp {cp} does not divide the {world} ranks")
    mesh = init_device_mesh(device_type, (world // cp, cp), mesh_dim_names=("dp", "cp"))
    return context_parallel_on(model, mesh.get_group("cp"), cp, mesh.get_local_rank("cp"))
