"""ParallelModel: this rank's part of an HF causal LM under tensor and pipeline parallelism (docs/parallelism.md).

backends/model_parallel/split.py builds it. With pp == 1, `ParallelModel(input_ids, labels)` returns the loss;
with any pp, `train_batch(micro_batches)` runs forward and backward over all the micro-batches (through the
pipeline schedule when pp > 1) and returns the mean loss on every rank. Full and op-level activation checkpointing
are applied here, per layer as the model runs them (`_layer`); the parameters stay plain tensors (each rank's local shard),
so any data-parallel wrapper composes with them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint, noop_context_fn

from backends.decoder_anatomy import (
    architecture_of,
    decoder_layers,
    embed,
    final_norm,
    get_path,
    layer_arguments,
    run_layer,
)
from backends.parallel_dims import ParallelDims, ParallelGroups
from backends.parts.op_checkpoint_policy import op_checkpoint_contexts
from backends.tensor_parallel.apply import shard_specs
from backends.tensor_parallel.collectives import scatter_sequence
from backends.tensor_parallel.cross_entropy import vocab_parallel_causal_lm_loss, vocab_parallel_loss_sum

CHECKPOINT_MODES = ("none", "selective", "op", "full")


class ParallelModel(nn.Module):
    def __init__(
        self,
        model: nn.Module,
        groups: ParallelGroups,
        *,
        chunk_ranges: list[tuple[int, int]],
        sequence_parallel: bool,
        activation_checkpointing: str,
        tied_embedding_grad_group: Any = None,
        context_parallel: Any = None,
        expert_parallel: Any = None,
        router_loss: Any = None,
    ):
        super().__init__()
        self.module = model
        # A backends.context_parallel ContextParallel when layout.cp > 1: each micro-batch is split over the cp ranks.
        self.context_parallel = context_parallel
        # A mixture of experts (backends/expert_parallel): its ExpertParallel when ep > 1, and its router's loss.
        self.expert_parallel = expert_parallel
        self.router_loss = router_loss
        self.groups = groups
        # Layers of each model chunk this rank runs: one chunk, or `virtual_stages` for interleaved 1F1B,
        # chunk c being pipeline stage c * pp + pp_rank.
        self.chunk_ranges = chunk_ranges
        self.sequence_parallel = sequence_parallel
        self.activation_checkpointing = activation_checkpointing
        self.is_first_stage = groups.pp_rank == 0
        self.is_last_stage = groups.pp_rank == groups.dims.pp - 1
        self.tied_embedding_grad_group = tied_embedding_grad_group
        self.shard_specs = shard_specs(model)  # name -> (dim, sections), for resharding checkpoints
        # name -> unpadded rows, for vocabulary tensors padded to a multiple of tp
        # name -> how many TP ranks hold the same slice (key/value heads fewer than tp)
        self.tp_replicas = {
            f"{module_name}.{param_name}": module.replicas
            for module_name, module in model.named_modules()
            if getattr(module, "replicas", 1) > 1
            for param_name, _ in module.named_parameters(recurse=False)
        }
        self.padded_rows = {
            name: model.config.vocab_size
            for name in self.shard_specs
            if name.endswith(".weight") and _is_vocab_tensor(model, name)
        }
        # The head's rows are this rank's slice of the vocabulary (all of it when tp == 1).
        self.vocab_start = model.lm_head.weight.shape[0] * groups.tp_rank if self.is_last_stage else 0
        self.pipeline_runner = None  # set by parallelize when pp > 1

    @property
    def dims(self) -> ParallelDims:
        return self.groups.dims

    def _layer(self, index: int, hidden: torch.Tensor, arguments: dict[str, Any]) -> torch.Tensor:
        layer = decoder_layers(self.module)[index]
        if self.activation_checkpointing in ("full", "op") and self.training:
            contexts = op_checkpoint_contexts if self.activation_checkpointing == "op" else noop_context_fn
            return checkpoint(run_layer, layer, hidden, arguments, use_reentrant=False, context_fn=contexts)
        return run_layer(layer, hidden, arguments)

    @property
    def carries_router_sums(self) -> bool:
        """Whether pipeline stages hand the routers' load-balancing sums on beside the hidden states."""
        return self.dims.pp > 1 and self.router_loss is not None and self.router_loss.enabled

    def stage_forward(
        self,
        inputs: torch.Tensor,
        chunk: int = 0,
        positions: torch.Tensor | None = None,
        router_sums: torch.Tensor | None = None,
    ) -> Any:
        """Input ids (first stage) or hidden states -> hidden states, or vocab-sharded logits on the last stage.
        positions: the tokens' true positions (context parallelism), else 0..seq_len-1. When the stages carry
        the routers' sums (carries_router_sums), they come in beside the hidden states (none on the first
        stage) and go out with this chunk's layers added: (output, sums)."""
        tp_group = self.groups.tp_group
        first = self.is_first_stage and chunk == 0
        last = self.is_last_stage and chunk == len(self.chunk_ranges) - 1
        if first:
            hidden = embed(self.module, inputs, positions)
            seq_len = hidden.shape[1]
            if self.sequence_parallel:
                hidden = scatter_sequence(hidden, tp_group)
        else:
            hidden = inputs
            seq_len = hidden.shape[1] * (self.dims.tp if self.sequence_parallel else 1)
        arguments = layer_arguments(self.module, hidden, seq_len, positions)
        with self.router_loss.collecting() if self.router_loss is not None else contextlib.nullcontext():
            for index in range(*self.chunk_ranges[chunk]):
                hidden = self._layer(index, hidden, arguments)
        if last:
            norm = final_norm(self.module)
            if norm is not None:
                hidden = norm(hidden)  # under SP its forward hook all-gathers the sequence
            hidden = self.module.lm_head(hidden)
        if not self.carries_router_sums:
            return hidden
        sums = self.router_loss.empty_sums(hidden.device) if router_sums is None else router_sums
        return hidden, self.router_loss.add_layer_sums(sums)

    def loss(self, local_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return vocab_parallel_causal_lm_loss(
            local_logits, labels, self.vocab_start, self.groups.tp_group, self.module.config.vocab_size
        )

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        if self.dims.pp > 1:
            raise RuntimeError("with pipeline parallelism, call train_batch(micro_batches) instead of forward")
        labels = input_ids if labels is None else labels
        if self.context_parallel is not None:
            return self._context_parallel_loss(input_ids, labels)
        logits = self.stage_forward(input_ids)
        if self.router_loss is None:
            return self.loss(logits, labels)
        sums = self.router_loss.add_layer_sums(self.router_loss.empty_sums(logits.device))
        return self.loss(logits, labels) + self.router_loss.term(sums)

    def _context_parallel_loss(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """This rank's share: its chunks' summed token loss over the micro-batch's count, times cp
        (backends/context_parallel/apply.py says why ZeRO's mean then gives the single-process gradient)."""
        ids, positions, targets, counted = self.context_parallel.split(input_ids, labels)
        logits = self.stage_forward(ids, positions=positions)
        vocab = self.module.config.vocab_size
        summed = vocab_parallel_loss_sum(logits, targets, self.vocab_start, self.groups.tp_group, vocab)
        return summed / counted * self.context_parallel.cp

    def eval_loss(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The mean token loss of one batch, without gradients, the same on every rank."""
        if self.dims.pp > 1:
            from backends.pipeline_parallel.evaluate import pipeline_eval_loss

            return pipeline_eval_loss(self, input_ids, labels)
        with torch.no_grad():
            loss = self(input_ids, labels).detach().float()
            if self.context_parallel is not None:
                return torch.tensor(self.context_parallel.mean_over_ranks(loss))
            return loss

    def train_batch(
        self, micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]], *, loss_multiplier: float = 1.0
    ) -> torch.Tensor:
        """Forward + backward over the micro-batches; gradients are the mean over them (times loss_multiplier,
        e.g. an fp16 loss scale). Returns the mean (unscaled) loss, the same on every rank."""
        if self.dims.pp > 1:
            loss = self.pipeline_runner.train_batch(micro_batches, loss_multiplier=loss_multiplier)
        else:
            total = torch.zeros((), device=next(self.parameters()).device)
            for input_ids, labels in micro_batches:
                loss = self(input_ids, labels)
                (loss * (loss_multiplier / len(micro_batches))).backward()
                total += loss.detach()
            loss = total / len(micro_batches)
        self.finish_gradients()
        return loss

    def finish_gradients(self) -> None:
        """Sum the gradients of an embedding tied to the head across the first and last pipeline stages."""
        group = self.tied_embedding_grad_group
        if group is None or not (self.is_first_stage or self.is_last_stage):
            return
        weight = self.tied_weight()
        if weight.grad is None:
            weight.grad = torch.zeros_like(weight)
        dist.all_reduce(weight.grad, group=group)

    def grad_norm_weights(self) -> dict[str, float]:
        """Name (as in self.named_parameters()) -> weight of its squared gradient in the global norm.

        Summing weight x |grad|^2 over this rank's parameters and then over the tp and pp groups
        (model_parallel_sum) counts every model parameter exactly once: TP-replicated parameters
        (norms, row biases, position embeddings) are held by every TP rank, so each copy counts 1/tp;
        the last stage's copy of a tied embedding counts 0. Under expert parallelism the ep ranks hold
        the same non-expert parameters, each copy counting 1/ep too. ZeRO adds its own sum over dp.
        """
        replicated_over_ep = set(self.expert_parallel.other_names) if self.expert_parallel is not None else set()
        tied_copy = self.tied_embedding_grad_group is not None and self.is_last_stage and not self.is_first_stage
        weights = {}
        for name, _ in self.named_parameters():
            inner = name.removeprefix("module.")
            if tied_copy and inner == "lm_head.weight":
                weights[name] = 0.0
            else:
                weights[name] = (
                    1.0 / self.tp_replicas.get(inner, 1) if inner in self.shard_specs else 1.0 / self.dims.tp
                ) / (self.dims.ep if inner in replicated_over_ep else 1)
        return weights

    def model_parallel_sum(self, value: torch.Tensor, op: Any = None) -> torch.Tensor:
        """All-reduce `value` in place over the tp, pp and ep groups (sum, or e.g. MAX for overflow flags)."""
        for size, name in ((self.dims.tp, "tp"), (self.dims.pp, "pp"), (self.dims.ep, "ep")):
            if size > 1:
                dist.all_reduce(value, op=op or dist.ReduceOp.SUM, group=self.groups.group(name))
        return value

    def global_grad_norm(self) -> float:
        """L2 norm of the whole model's gradient, when .grad holds full (dp-averaged) gradients."""
        weights = self.grad_norm_weights()
        square = torch.zeros((), dtype=torch.float64, device=next(self.parameters()).device)
        for name, param in self.named_parameters():
            if param.grad is not None and weights[name]:
                square += weights[name] * param.grad.detach().double().pow(2).sum()
        return float(self.model_parallel_sum(square).sqrt())

    def tied_weight(self) -> nn.Parameter:
        if self.is_first_stage:
            arch = architecture_of(self.module)
            return get_path(self.module, f"{arch.backbone}.{arch.token_embedding}").weight
        return self.module.lm_head.weight


def _is_vocab_tensor(model: nn.Module, name: str) -> bool:
    arch = architecture_of(model)
    return name in (f"{arch.backbone}.{arch.token_embedding}.weight", "lm_head.weight")
