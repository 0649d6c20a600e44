"""Turn an HF causal LM into this rank's tensor/pipeline-parallel part (docs/parallelism.md).

`parallelize(model, dims, activation_checkpointing=..., sequence_parallel=...)`
applies, in order: pipeline stage pruning (this rank keeps only its stage's
layers, and the embedding / head if first / last), tensor parallelism, an MoE
model's experts over ep (and their ffn over tp; backends/expert_parallel),
context parallelism, then activation checkpointing. The engine then wraps the returned ParallelModel's
parameters with ZeRO on `groups.dp_group`. The parameters stay plain tensors
(each rank's local shard), so any data-parallel wrapper composes with them.

With pp == 1, `ParallelModel(input_ids, labels)` returns the loss; with any
pp, `train_batch(micro_batches)` runs forward and backward over all the
micro-batches (through the pipeline schedule when pp > 1) and returns the
mean loss on every rank.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint

from backends.decoder_anatomy import (
    architecture_of,
    decoder_layers,
    embed,
    final_norm,
    get_path,
    layer_arguments,
    require_sdpa,
    run_layer,
)
from backends.parallel_dims import ParallelDims, ParallelGroups, build_groups
from backends.pipeline_parallel.split import stage_layer_ranges
from backends.pipeline_parallel.stages import is_tied, per_virtual_stage, prune_to_stage, tied_embedding_groups
from backends.tensor_parallel.apply import apply_tensor_parallel, shard_specs
from backends.tensor_parallel.collectives import scatter_sequence
from backends.tensor_parallel.cross_entropy import vocab_parallel_causal_lm_loss, vocab_parallel_loss_sum
from planner.errors import UserInputError

CHECKPOINT_MODES = ("none", "selective", "full")


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
        if self.activation_checkpointing == "full" and self.training:
            return checkpoint(run_layer, layer, hidden, arguments, use_reentrant=False)
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


def parallelize(
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
    """This rank's part of `model` under the layout; see the module docstring for the order of steps."""
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
