"""Drive this rank's pipeline stage(s) through GPipe, 1F1B or interleaved 1F1B (torch.distributed.pipelining).

Stages are built by hand (backends/parallelize.py prunes the HF model to its
layers), so no tracing is involved and each stage may itself be
tensor-parallel: the pipeline group links ranks with the same dp and tp
coordinates. Shapes are given to PipelineStage up front, which skips its
shape-inference pass (that pass would run the TP collectives on meta
tensors).

Gradient scaling: the loss of each micro-batch is divided by the number of
micro-batches inside the loss function (scale_grads=False), so gradients are
the mean over micro-batches as soon as backward writes them, which keeps
ZeRO's gradient hooks valid; nothing rescales .grad afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")


class _Stage(nn.Module):
    def __init__(self, parallel_model: nn.Module, chunk: int):
        super().__init__()
        self.parallel_model = parallel_model
        self.chunk = chunk

    def forward(self, inputs: torch.Tensor, router_sums: torch.Tensor | None = None) -> Any:
        return self.parallel_model.stage_forward(inputs, self.chunk, router_sums=router_sums)


class PipelineRunner:
    def __init__(self, parallel_model, *, schedule: str = "1f1b"):
        schedule = schedule.lower()
        if schedule not in SCHEDULES:
            from planner.errors import UserInputError

            raise UserInputError(
                f"pipeline schedule '{schedule}' is not supported by the engine yet; use one of {SCHEDULES}"
            )
        self.parallel_model = parallel_model
        self.schedule_name = schedule
        self._schedules: dict[tuple, object] = {}
        self._loss_scale = 1.0

    def _example_tensors(self, micro_batch: int, seq_len: int, chunk: int) -> tuple[tuple, tuple]:
        """(inputs, outputs) of one chunk, with the routers' sums beside the hidden states of an MoE
        (backends/expert_parallel/router_loss.py)."""
        model = self.parallel_model
        config = model.module.config
        dtype, device = next(model.parameters()).dtype, next(model.parameters()).device
        shard_len = seq_len // model.dims.tp if model.sequence_parallel else seq_len
        # requires_grad marks activations that carry gradients back to the previous stage.
        hidden = torch.zeros(micro_batch, shard_len, config.hidden_size, dtype=dtype, device=device, requires_grad=True)
        first = model.is_first_stage and chunk == 0
        last = model.is_last_stage and chunk == len(model.chunk_ranges) - 1
        inputs = torch.zeros(micro_batch, seq_len, dtype=torch.long, device=device) if first else hidden
        if last:
            vocab_shard = model.module.lm_head.weight.shape[0]
            outputs = torch.zeros(micro_batch, seq_len, vocab_shard, dtype=dtype, device=device, requires_grad=True)
        else:
            outputs = hidden
        if not model.carries_router_sums:
            return (inputs,), (outputs,)
        sums = model.router_loss.empty_sums(device).requires_grad_()
        return ((inputs,) if first else (inputs, sums)), (outputs, sums)

    def _schedule(self, n_micro: int, micro_batch: int, seq_len: int):
        key = (n_micro, micro_batch, seq_len)
        if key not in self._schedules:
            from torch.distributed.pipelining import (
                PipelineStage,
                Schedule1F1B,
                ScheduleGPipe,
                ScheduleInterleaved1F1B,
            )

            model = self.parallel_model
            pp, chunks = model.dims.pp, len(model.chunk_ranges)
            stages = []
            for chunk in range(chunks):
                inputs, outputs = self._example_tensors(micro_batch, seq_len, chunk)
                stages.append(
                    PipelineStage(
                        _Stage(model, chunk),
                        chunk * pp + model.groups.pp_rank,
                        pp * chunks,
                        inputs[0].device,
                        input_args=inputs,
                        output_args=outputs,
                        group=model.groups.pp_group,
                    )
                )
            if self.schedule_name == "interleaved-1f1b":
                schedule = ScheduleInterleaved1F1B(
                    stages, n_microbatches=n_micro, loss_fn=self._loss, scale_grads=False
                )
            else:
                schedule_class = ScheduleGPipe if self.schedule_name == "gpipe" else Schedule1F1B
                schedule = schedule_class(stages[0], n_microbatches=n_micro, loss_fn=self._loss, scale_grads=False)
            self._schedules[key] = schedule
        return self._schedules[key]

    def _loss(self, output: Any, labels: torch.Tensor) -> torch.Tensor:
        model = self.parallel_model
        if not model.carries_router_sums:
            return model.loss(output, labels) * self._loss_scale
        local_logits, router_sums = output
        return (model.loss(local_logits, labels) + model.router_loss.term(router_sums)) * self._loss_scale

    def train_batch(
        self, micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]], *, loss_multiplier: float = 1.0
    ) -> torch.Tensor:
        """Forward and backward of all micro-batches; the mean loss, broadcast from the last stage."""
        model = self.parallel_model
        n_micro = len(micro_batches)
        device = next(model.parameters()).device
        input_ids = torch.cat([ids for ids, _ in micro_batches]).to(device)
        labels = torch.cat([target for _, target in micro_batches]).to(device)
        micro_batch, seq_len = micro_batches[0][0].shape
        schedule = self._schedule(n_micro, micro_batch, seq_len)
        self._loss_scale = loss_multiplier / n_micro
        losses: list[torch.Tensor] = []
        if model.is_first_stage:
            schedule.step(input_ids, target=labels if model.is_last_stage else None, losses=losses)
        elif model.is_last_stage:
            schedule.step(target=labels, losses=losses)
        else:
            schedule.step()
        loss = torch.zeros((), device=device)
        if model.is_last_stage:
            loss = torch.stack([item.detach().float() for item in losses]).sum() / loss_multiplier
        dist.broadcast(loss, src=model.groups.pp_peer(model.dims.pp - 1), group=model.groups.pp_group)
        return loss
