"""Expert parallelism on an HF MoE model: groups, the experts swap, and the gradient reductions.

The ep ranks are carved out of data parallelism, as in DeepSpeed-MoE (planner/contract/layout.py: ep
divides dp). With ep innermost, ranks k*ep ... k*ep+ep-1 form an ep group (they exchange tokens and
each holds E/ep experts); ranks holding the same experts (one per ep group) form an expert-data-parallel
group of dp/ep ranks. The engine's ZeRO (any stage) runs on that group, where every rank holds the same
parameters. Before ZeRO reduces a unit's gradients at an accumulation boundary (reduce_unit_gradient: after
backward under ZeRO-0/1, as each unit's gradients land during backward under ZeRO-2/3):

- a non-expert gradient (attention, router, norms, embeddings: the same weights on every ep rank, fed
  different tokens) is averaged over the ep group, so ZeRO's average over the rest makes the mean over
  all dp ranks;
- an expert gradient already sums every ep rank's tokens (the token exchange's backward brought them
  to the owner), so it is divided by ep for the same mean.

The gradient norm counts each non-expert parameter once and every expert once: to the norm's reduction
this object is a model-parallel dimension whose replicated parameters weigh 1/ep (as a tensor-parallel
layout's replicated norms weigh 1/tp, backends/zero/grad_norm.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from backends.expert_parallel.dispatch import ExpertParallelExperts


def _is_experts_module(module: nn.Module) -> bool:
    """transformers 5's fused experts in the layout dispatch.py computes (Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3):
    num_experts, bias-free 3-D gate_up_proj (E, 2F, H) and down_proj (E, H, F). gpt-oss's (biased, clamped,
    interleaved) and Llama 4's ((E, H, 2F), every expert on every token) are not that layout."""
    weights = [getattr(module, name, None) for name in ("gate_up_proj", "down_proj")]
    if not hasattr(module, "num_experts") or not all(isinstance(w, nn.Parameter) and w.dim() == 3 for w in weights):
        return False
    gate_up, down = weights
    return gate_up.shape[1] == 2 * down.shape[2] and not hasattr(module, "gate_up_proj_bias")


@dataclass
class ExpertParallel:
    ep: int
    ep_group: Any
    expert_dp_group: Any
    ep_rank: int
    expert_names: set[str] = field(default_factory=set)
    other_names: list[str] = field(default_factory=list)

    # --- the norm's model-parallel interface (backends/zero/grad_norm.py) -------------------------
    def grad_norm_weights(self) -> dict[str, float]:
        return dict.fromkeys(self.other_names, 1.0 / self.ep)

    def model_parallel_sum(self, value: Any, op: Any) -> None:
        import torch.distributed as dist

        dist.all_reduce(value, op=op, group=self.ep_group)

    # --- the boundary reductions ------------------------------------------------------------------
    def reduce_unit_gradient(self, unit: Any, flat: Any) -> None:
        """On one ZeRO unit's flat local gradient, before ZeRO reduces it over the expert-data-parallel group
        (collective over the ep group; every rank reaches its units in the same order)."""
        import torch.distributed as dist

        segments = [
            (offset, param.numel(), name.removeprefix("module.") in self.expert_names)
            for name, param, offset in zip(unit.names, unit.params, unit.offsets, strict=True)
        ]
        others = [flat[offset : offset + size] for offset, size, expert in segments if not expert]
        if others:
            joined = torch.cat(others)
            dist.all_reduce(joined, group=self.ep_group)
            position = 0
            for part in others:
                part.copy_(joined[position : position + part.numel()])
                position += part.numel()
        flat[: unit.numel].div_(self.ep)  # the replicated ones' mean over ep; each expert's sum over the ep tokens

    def own_experts(self, name: str, full: Any) -> Any:
        """This rank's run of experts of the full (all experts) tensor `name`; any other tensor as it is."""
        return full.chunk(self.ep)[self.ep_rank] if name in self.expert_names else full

    def full_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """A state dict of this rank's tensors with every expert's: each expert tensor gathered over the ep
        group (collective) and concatenated in ep-rank order, which is expert order."""
        import torch.distributed as dist

        full = dict(state)
        for name in sorted(self.expert_names):
            local = state[name].contiguous()
            parts = [torch.empty_like(local) for _ in range(self.ep)]
            dist.all_gather(parts, local, group=self.ep_group)
            full[name] = torch.cat(parts)
        return full


def swap_experts(
    model: nn.Module, ep_group: Any, capacity_factor: float = 0.0, tensor_group: Any = None, *, stage: bool = False
) -> tuple[set[str], list[str]]:
    """Swap every fused experts module of `model` for this rank's ExpertParallelExperts (collective); returns the
    names of the expert parameters and of the others. `stage`: the model is one pipeline stage of a family the
    engine's plan covers, which may hold only dense layers (DeepSeek's first blocks)."""
    swapped = [(name, module) for name, module in model.named_modules() if _is_experts_module(module)]
    if not swapped and not stage:
        raise ValueError(
            f"{type(model).__name__} has no experts module the engine can split (bias-free fused gate_up_proj of "
            "experts x 2 ffn x hidden, as Mixtral, Qwen-MoE and DeepSeek store them)"
        )
    for name, module in swapped:
        parent_name, _, attribute = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attribute, ExpertParallelExperts(module, ep_group, capacity_factor, tensor_group))
    expert_names = {f"{name}.{weight}" for name, _ in swapped for weight in ("gate_up_proj", "down_proj")}
    return expert_names, [name for name, _ in model.named_parameters() if name not in expert_names]


def apply_expert_parallel(
    model: nn.Module, ep: int, capacity_factor: float = 0.0, device_type: str = "cpu"
) -> ExpertParallel:
    """Expert parallelism on its own (tp and pp 1): the (expert-dp, ep) mesh over the job, then the swap."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    if world % ep:
        raise ValueError(f"ep {ep} does not divide the {world} ranks")
    mesh = init_device_mesh(device_type, (world // ep, ep), mesh_dim_names=("edp", "ep"))
    ep_group, expert_dp_group = mesh.get_group("ep"), mesh.get_group("edp")
    expert_names, others = swap_experts(model, ep_group, capacity_factor)
    return ExpertParallel(ep, ep_group, expert_dp_group, mesh.get_local_rank("ep"), expert_names, others)
