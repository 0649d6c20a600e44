"""This rank's experts, and the token exchange that feeds them (docs/parallelism.md, "Expert parallelism").

An HF MoE layer (Mixtral, Qwen2-MoE in transformers 5) stores all its experts
as two 3-D parameters, gate_up_proj (E, 2F, H) and down_proj (E, H, F), and is
called as experts(hidden (T, H), top_k_index (T, k), top_k_weights (T, k)).
ExpertParallelExperts keeps E/ep of them (rank r owns experts r*E/ep ...) and,
on each call:

1. orders this rank's (token, expert) assignments by expert, hence by owner;
2. with a capacity factor c, keeps at most ceil(c * T * k / E) assignments per
   expert from this rank (later tokens are dropped: they add nothing, as in
   GShard); c = 0 drops nothing;
3. exchanges the counts, then the tokens, with all_to_all over the ep group;
4. runs each local expert on the tokens it received (the HF expert's math:
   act(gate) * up, then down);
5. sends the outputs back with all_to_all, weights them by the router and sums
   them into each token's row.

Both exchanges are differentiable (torch's funcol all_to_all_single_autograd),
so backward returns each token's gradient to its rank and leaves every expert's
gradient, from all the ep ranks' tokens, on its owner.

Under tensor parallelism (a tp group beside the ep group) each tp rank holds
its share of the ffn of every expert it owns: gate_up_proj's gate and up rows
and down_proj's columns split tp ways, as a column- then row-parallel MLP
splits them (`shard_spec`, which checkpoints read). Every tp rank routes the
same tokens and exchanges them with the ep ranks at its own tp coordinate, so
its output is its partial sum of each expert's output; the MoE block around it
sums those over tp (backends/expert_parallel/tensor_parallel.py).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn


def expert_capacity(tokens: int, top_k: int, experts: int, capacity_factor: float) -> int | None:
    """Assignments one rank may send to each expert; None for no limit (capacity factor 0)."""
    if capacity_factor <= 0:
        return None
    return max(1, math.ceil(capacity_factor * tokens * top_k / experts))


class ExpertParallelExperts(nn.Module):
    def __init__(self, experts: nn.Module, group: Any, capacity_factor: float = 0.0, tensor_group: Any = None):
        import torch.distributed as dist

        from backends.tensor_parallel.layers import shard_tensor

        super().__init__()
        self.group = group  # None: no expert parallelism (ep 1), the experts split over tp only
        self.ep = dist.get_world_size(group) if group is not None else 1
        self.num_experts = int(experts.num_experts)
        if self.num_experts % self.ep:
            raise ValueError(f"ep {self.ep} does not divide the {self.num_experts} experts")
        self.local = self.num_experts // self.ep
        self.first = dist.get_rank(group) * self.local if group is not None else 0
        own = slice(self.first, self.first + self.local)
        tp = dist.get_world_size(tensor_group) if tensor_group is not None else 1
        tp_rank = dist.get_rank(tensor_group) if tensor_group is not None else 0
        # name -> (split dim, fused sections) under tp: gate | up rows, down's columns (the ffn width)
        self.shard_spec = {"gate_up_proj": (1, 2), "down_proj": (2, 1)} if tp > 1 else {}
        weights = {"gate_up_proj": experts.gate_up_proj.detach()[own], "down_proj": experts.down_proj.detach()[own]}
        for name, full in weights.items():
            if name in self.shard_spec:
                dim, sections = self.shard_spec[name]
                try:
                    full = shard_tensor(full, dim, tp_rank, tp, sections)
                except ValueError:
                    raise ValueError(
                        f"tensor parallelism {tp} does not divide the experts' ffn width {full.shape[dim] // sections}"
                    ) from None
            setattr(self, name, nn.Parameter(full.clone()))
        self.act_fn = experts.act_fn
        self.capacity_factor = capacity_factor
        self.dropped = 0  # assignments dropped by the capacity limit at the last call, on this rank

    def _exchange(self, tensor: torch.Tensor, receive: list[int], send: list[int]) -> torch.Tensor:
        import torch.distributed._functional_collectives as funcol

        if self.group is None:
            return tensor
        out = funcol.all_to_all_single_autograd(tensor, receive, send, self.group)
        return funcol.wait_tensor(out)

    def forward(self, hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        tokens, top_k = top_k_index.shape
        expert_of = top_k_index.reshape(-1)
        order = torch.argsort(expert_of, stable=True)
        expert_sorted = expert_of[order]
        capacity = expert_capacity(tokens, top_k, self.num_experts, self.capacity_factor)
        if capacity is not None:  # position of each assignment among its expert's, in token order
            starts = torch.searchsorted(expert_sorted, expert_sorted, side="left")
            keep = torch.arange(expert_sorted.numel(), device=hidden.device) - starts < capacity
            self.dropped = int((~keep).sum())
            order, expert_sorted = order[keep], expert_sorted[keep]
        token_of = order // top_k
        owner = expert_sorted // self.local
        send_counts = torch.bincount(owner, minlength=self.ep)
        receive_counts, local_expert = send_counts, expert_sorted - owner * self.local
        if self.group is not None:
            receive_counts = torch.empty_like(send_counts)
            dist.all_to_all_single(receive_counts, send_counts, group=self.group)
        send, receive = send_counts.tolist(), receive_counts.tolist()
        received = self._exchange(hidden[token_of], receive, send)
        if self.group is not None:
            local_expert = torch.empty(sum(receive), dtype=expert_sorted.dtype, device=hidden.device)
            dist.all_to_all_single(local_expert, expert_sorted - owner * self.local, receive, send, group=self.group)
        outputs = torch.zeros_like(received)
        for expert in range(self.local):
            rows = (local_expert == expert).nonzero().squeeze(1)
            gate, up = nn.functional.linear(received[rows], self.gate_up_proj[expert]).chunk(2, dim=-1)
            result = nn.functional.linear(self.act_fn(gate) * up, self.down_proj[expert])
            outputs = outputs.index_copy(0, rows, result.to(outputs.dtype))
        returned = self._exchange(outputs, send, receive)
        weighted = returned * top_k_weights.reshape(-1)[order, None]
        return torch.zeros_like(hidden).index_add(0, token_of, weighted.to(hidden.dtype))
