"""Forward-only pass through a pipeline: the loss of one batch for evaluation, no gradients, no schedule.

Training needs a schedule to overlap micro-batches; evaluation of one batch
needs only to hand the activations along the stages in order. Stage s (of
pp x chunks) lives on pipeline rank s % pp as its chunk s // pp, so the
activations go rank to rank (and around again for interleaved chunks); the
last stage computes the vocab-parallel loss, which every stage then receives. An MoE's stages hand the
routers' load-balancing sums on too (backends/expert_parallel/router_loss.py), so the loss is the one training
reports.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def pipeline_eval_loss(parallel_model: Any, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    model = parallel_model
    groups, pp = model.groups, model.dims.pp
    chunks = len(model.chunk_ranges)
    device = next(model.parameters()).device
    config = model.module.config
    dtype = next(model.parameters()).dtype
    seq_len = input_ids.shape[1] // (model.dims.tp if model.sequence_parallel else 1)
    hidden_shape = (input_ids.shape[0], seq_len, config.hidden_size)
    loss = torch.zeros((), device=device, dtype=torch.float32)
    carried = model.carries_router_sums
    hidden: Any = None
    sums: Any = None
    with torch.no_grad():
        for stage in range(pp * chunks):
            owner, chunk = stage % pp, stage // pp
            if groups.pp_rank != owner:
                continue
            if stage == 0:
                inputs = input_ids.to(device)
            elif pp > 1:
                inputs = torch.empty(hidden_shape, dtype=dtype, device=device)
                dist.recv(inputs, src=groups.pp_peer((stage - 1) % pp), group=groups.pp_group)
                if carried:
                    sums = model.router_loss.empty_sums(device)
                    dist.recv(sums, src=groups.pp_peer((stage - 1) % pp), group=groups.pp_group)
            else:
                inputs = hidden
            output = model.stage_forward(inputs, chunk, router_sums=sums)
            if carried:
                output, sums = output
            if stage == pp * chunks - 1:
                loss = model.loss(output, labels.to(device)).float()
                if carried:
                    loss = loss + model.router_loss.term(sums)
            elif pp > 1:
                dist.send(output.contiguous(), dst=groups.pp_peer((stage + 1) % pp), group=groups.pp_group)
                if carried:
                    dist.send(sums, dst=groups.pp_peer((stage + 1) % pp), group=groups.pp_group)
            else:
                hidden = output
    dist.broadcast(loss, src=groups.pp_peer(pp - 1), group=groups.pp_group)
    return loss
