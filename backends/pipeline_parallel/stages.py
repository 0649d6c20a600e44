"""Cut an HF decoder down to one pipeline rank's stage(s), and the groups a tied embedding needs.

A rank keeps the layers of its chunks under their global indices (so state
dicts keep the HF names), the embedding if it holds stage 0 and the final
norm and head if it holds the last stage. A tied embedding (GPT-2) lives on
both ends; the first and last stage sum its gradient over a two-rank group.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.distributed as dist
from torch import nn

from backends.decoder_anatomy import architecture_of, decoder_layers, get_path, set_path
from backends.parallel_dims import ParallelGroups


def prune_to_stage(model: nn.Module, first: bool, last: bool, chunk_ranges: list[tuple[int, int]]) -> None:
    """Drop the modules other stages own; kept layers keep their global index (and state-dict names)."""
    arch = architecture_of(model)
    layers = decoder_layers(model)
    for index in range(len(layers)):
        if not any(start <= index < end for start, end in chunk_ranges):
            layers[index] = nn.Identity()
    backbone = get_path(model, arch.backbone)
    if not first:
        for name in (arch.token_embedding, *[m for m in arch.extra_modules if m != "rotary_emb"]):
            set_path(backbone, name, None)
    if not last:
        set_path(backbone, arch.final_norm, None)
        model.lm_head = None
    elif not first and model.lm_head.weight is not None:
        # A tied head keeps its own copy of the embedding; finish_gradients keeps the two in step.
        model.lm_head.weight = nn.Parameter(model.lm_head.weight.detach().clone())


def is_tied(model: nn.Module) -> bool:
    arch = architecture_of(model)
    head = model.get_output_embeddings()
    return head is not None and get_path(model, f"{arch.backbone}.{arch.token_embedding}").weight is head.weight


def tied_embedding_groups(groups: ParallelGroups) -> Any:
    """One group per (dp, tp) coordinate holding the first and last stage; every rank creates all of them."""
    dims, mine = groups.dims, None
    for dp in range(dims.dp):
        for tp in range(dims.tp):
            ranks = sorted(
                {groups.global_rank_of(pp=0, dp=dp, tp=tp), groups.global_rank_of(pp=dims.pp - 1, dp=dp, tp=tp)}
            )
            group = dist.new_group(ranks)
            if dp == groups.dp_rank and tp == groups.tp_rank:
                mine = group
    return mine


def per_virtual_stage(stage_split: Sequence[int] | None, pp: int, virtual_stages: int) -> list[int] | None:
    """A plan's stage_split lists layers per pipeline rank; with virtual stages each rank's share is cut
    into `virtual_stages` near-equal chunks (a list already per virtual stage is used as it is)."""
    if stage_split is None or virtual_stages == 1 or len(stage_split) == pp * virtual_stages:
        return None if stage_split is None else list(stage_split)
    if len(stage_split) != pp:
        return list(stage_split)  # stage_layer_ranges explains what is wrong
    per_rank = [
        [count // virtual_stages + (1 if c < count % virtual_stages else 0) for c in range(virtual_stages)]
        for count in stage_split
    ]
    # Chunk c of rank r is stage c * pp + r.
    return [per_rank[rank][chunk] for chunk in range(virtual_stages) for rank in range(pp)]
