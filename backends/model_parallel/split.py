"""Split an HF causal LM into this rank's tensor/pipeline-parallel part: `split_model(model, dims, ...)`.

In order: pipeline stage pruning (this rank keeps only its stage's layers, and the embedding / head if first /
last), tensor parallelism, an MoE model's experts over ep (and their ffn over tp; backends/expert_parallel),
context parallelism, then selective activation checkpointing (full and op-level checkpointing run inside
ParallelModel).
backends/parallelize.py is the one entry that calls it (docs/parallelism.md).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from backends.decoder_anatomy import (
    architecture_of,
    decoder_layers,
    get_path,
    require_sdpa,
)
from backends.model_parallel.parallel_model import CHECKPOINT_MODES, ParallelModel
from backends.parallel_dims import ParallelDims, ParallelGroups, build_groups
from backends.pipeline_parallel.split import stage_layer_ranges
from backends.pipeline_parallel.stages import is_tied, per_virtual_stage, prune_to_stage, tied_embedding_groups
from backends.tensor_parallel.apply import apply_tensor_parallel
from planner.errors import UserInputError


def _checkpoint_attention(model: nn.Module) -> None:
    """Selective recomputation: keep the MLP activations, recompute attention in the backward."""
    arch = architecture_of(model)
    for layer in decoder_layers(model):
        if isinstance(layer, nn.Identity):
            continue
        attention = get_path(layer, arch.attention)
        original = attention.forward

        def recomputed(*args, _original=original, **kwargs):
            if not torch.is_grad_enabled():
                return _original(*args, **kwargs)
            return checkpoint(_original, *args, use_reentrant=False, **kwargs)

        attention.forward = functools.wraps(original)(recomputed)


def _split_experts(
    model: nn.Module, groups: ParallelGroups, sequence_parallel: bool, capacity_factor: float
) -> tuple[Any, Any]:
    """An MoE model's experts over the ep group and their ffn over tp, its router whole (backends/expert_parallel):
    (the ExpertParallel of ep > 1 or None, the router's load-balancing loss) or (None, None) for a dense model."""
    path = architecture_of(model).moe_block
    if not path:
        return None, None
    from backends.expert_parallel.apply import ExpertParallel, swap_experts
    from backends.expert_parallel.router_loss import RouterLoss
    from backends.expert_parallel.tensor_parallel import apply_moe_tensor_parallel

    dims = groups.dims
    if dims.cp > 1:
        raise UserInputError(f"layout {dims.describe()}: a mixture of experts runs with cp 1 here; use tp, pp and ep")
    ep_group = groups.group("ep") if dims.ep > 1 else None
    tp_group = groups.tp_group if dims.tp > 1 else None
    try:
        expert_names, others = swap_experts(model, ep_group, capacity_factor, tp_group, stage=dims.pp > 1)
    except ValueError as error:
        raise UserInputError(str(error)) from None
    if tp_group is not None:
        apply_moe_tensor_parallel(model, path, tp_group, sequence_parallel=sequence_parallel)
    expert_parallel = None
    if ep_group is not None:
        edp_group = groups.data_parallel_group
        expert_parallel = ExpertParallel(dims.ep, ep_group, edp_group, groups.local_rank("ep"), expert_names, others)
    return expert_parallel, RouterLoss(model, path, dims.tp)


def split_model(
    model: nn.Module,
    dims: ParallelDims | ParallelGroups,
    *,
    activation_checkpointing: str = "none",
    sequence_parallel: bool = False,
    stage_split: Sequence[int] | None = None,
    pipeline_schedule: str = "1f1b",
    virtual_stages: int | None = None,
    device_type: str = "cpu",
    expert_capacity_factor: float = 0.0,
) -> ParallelModel:
    """This rank's part of `model` under the layout; the module docstring says the order of steps."""
    if activation_checkpointing not in CHECKPOINT_MODES:
        raise ValueError(f"activation_checkpointing must be one of {CHECKPOINT_MODES}")
    groups = dims if isinstance(dims, ParallelGroups) else build_groups(dims, device_type)
    if groups.dims.tp > 1 and not architecture_of(model).tensor_parallel:
        raise UserInputError(
            f"the engine pipelines {model.config.model_type} models but does not split them over tp; use tp 1 "
            "(pp and ep)"
        )
    require_sdpa(model)
    if sequence_parallel and groups.dims.tp == 1:
        sequence_parallel = False  # nothing to split along
    pp = groups.dims.pp
    if virtual_stages is None:  # the planner's interleaved plans use 2 chunks per rank
        virtual_stages = 2 if pipeline_schedule == "interleaved-1f1b" and pp > 1 else 1
    # Without a plan's split: equal layers, and when they do not divide evenly the extra layers go to
    # middle stages, which hold neither the embedding nor the head (the planner's memory model gives
    # the first stage floor(layers / pp) blocks).
    ranges = stage_layer_ranges(
        len(decoder_layers(model)),
        pp * virtual_stages,
        per_virtual_stage(stage_split, pp, virtual_stages),
        first_extra=0.5,
        last_extra=0.5,
    )
    chunk_ranges = [ranges[chunk * pp + groups.pp_rank] for chunk in range(virtual_stages)]
    tied = is_tied(model)
    tied_group = tied_embedding_groups(groups) if tied and groups.dims.pp > 1 else None
    if groups.dims.pp > 1:
        prune_to_stage(model, groups.pp_rank == 0, groups.pp_rank == groups.dims.pp - 1, chunk_ranges)
    if groups.dims.tp > 1:
        apply_tensor_parallel(
            model,
            groups.tp_group,
            sequence_parallel=sequence_parallel,
            tp_groups_ranks=groups.mesh.mesh.reshape(-1, groups.dims.tp).tolist(),
        )
    expert_parallel, router_loss = _split_experts(model, groups, sequence_parallel, expert_capacity_factor)
    context_parallel = None
    if groups.dims.cp > 1:
        from backends.context_parallel.apply import context_parallel_on

        context_parallel = context_parallel_on(model, groups.cp_group, groups.dims.cp, groups.cp_rank)
    if activation_checkpointing == "selective":
        _checkpoint_attention(model)
    parallel = ParallelModel(
        model,
        groups,
        chunk_ranges=chunk_ranges,
        sequence_parallel=sequence_parallel,
        activation_checkpointing=activation_checkpointing,
        tied_embedding_grad_group=tied_group,
        context_parallel=context_parallel,
        expert_parallel=expert_parallel,
        router_loss=router_loss,
    )
    if device_type == "cuda" and not any(param.is_meta for param in parallel.parameters()):
        # Shard on the host, then move only this rank's part: the full model may not fit one GPU.
        # (A model built on the meta device is materialised on the GPU by its loader instead.)
        import os

        parallel.to(torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))))
    if groups.dims.pp > 1:
        from backends.pipeline_parallel.runner import PipelineRunner

        parallel.pipeline_runner = PipelineRunner(parallel, schedule=pipeline_schedule)
    return parallel
