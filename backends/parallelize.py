"""The one `parallelize(model, dims, config)`: a model made into this rank's part of a layout, in one order.

    TP -> CP/EP -> AC -> compile -> FSDP/ZeRO

1. tensor and pipeline parallelism (tp or pp > 1): backends/model_parallel/split.py prunes the model to this
   rank's pipeline stage, splits its tensors over tp, its experts over ep and its sequences over cp beside
   them, and returns a ParallelModel, which recomputes activations itself (selective: each attention; full and
   op: each layer as it runs them);
2. without tp or pp: context parallelism or expert parallelism alone, on the whole replica
   (backends/context_parallel, backends/expert_parallel);
3. activation checkpointing of the replica's blocks (backends/parts/activation_checkpointing.py), here and only
   here for every path that is not split;
4. compiled or Liger kernels (backends/parts/kernels.py), after checkpointing so that the recomputed blocks are
   the compiled ones;
5. the data-parallel wrapper, last: `shard` is the caller's (FSDP2's fully_shard per block, DDP); our engine's
   ZeRO and DeepSpeed shard the optimizer states over the returned data-parallel group afterwards instead.

The engine (backends/engine/initialize.py), every adapter (backends/adapters/) and the Lightning strategy call it;
the runner reaches it through the adapters (docs/parallelism.md). With `weights` (a model built on the meta
device), each rank reads what it holds: its tensor slices after a split, the whole replica before cp or ep,
and nothing yet under ZeRO-3 (`Parallelized.weights` is then handed to the engine, which reads its partition).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner.contract.layout import ParallelDims
from planner.errors import UserInputError

if TYPE_CHECKING:
    from torch import nn

    from backends.weights.source import WeightSource
    from planner.contract.engine_config import EngineConfig
    from planner.training_config import TrainingConfig


@dataclass(frozen=True)
class ParallelizeConfig:
    """How the model is split and run, beside the layout's degrees."""

    activation_checkpointing: str = "none"  # none | selective | op | full
    kernels: str = "eager"  # eager | compile | liger
    sequence_parallel: bool = False
    stage_split: tuple[int, ...] | None = None  # decoder layers per pipeline stage (the plan's stage map)
    pipeline_schedule: str = "1f1b"
    virtual_stages: int | None = None
    expert_capacity_factor: float = 0.0
    device_type: str = "cpu"  # the tensors are split on the host, then only this rank's part moves

    @classmethod
    def of_replica(cls, config: TrainingConfig, device_type: str) -> ParallelizeConfig:
        """A plan run by a data-parallel wrapper (DDP, FSDP, DeepSpeed): its checkpointing and kernels only."""
        return cls(
            activation_checkpointing=config.activation_checkpointing.value,
            kernels=config.kernels.value,
            device_type=device_type,
        )

    @classmethod
    def of_engine(cls, settings: EngineConfig) -> ParallelizeConfig:
        block = settings.hardware_selector
        return cls(
            activation_checkpointing=block.activation_checkpointing,
            kernels=block.kernels,
            sequence_parallel=block.sequence_parallel,
            stage_split=tuple(block.layout.stage_layers) if block.layout.stage_layers else None,
            pipeline_schedule=block.pipeline_schedule,
            virtual_stages=block.layout.virtual_stages,
            expert_capacity_factor=block.expert_capacity_factor,
            device_type=block.device,
        )


@dataclass
class Parallelized:
    """This rank's model, and what a data-parallel optimizer needs to know about how it was split."""

    model: Any  # what runs: the ParallelModel under tp/pp, else the (wrapped) replica
    weights: WeightSource | None = None  # still to be read (a ZeRO-3 partition), else None
    parallel_model: Any = None  # the ParallelModel under tp/pp
    dp_group: Any = None  # the ranks holding the same parameters, when not the whole world
    expert_parallel: Any = None
    context_parallel: Any = None


def parallelize(
    model: nn.Module,
    dims: ParallelDims,
    config: ParallelizeConfig,
    *,
    weights: WeightSource | None = None,
    device: Any = None,
    partitioned_states: bool = False,
    shard: Callable[[Any], Any] | None = None,
) -> Parallelized:
    """This rank's part of `model` under `dims`, built in the order the module docstring gives.

    device: where the replica goes (None: the caller has placed it already); partitioned_states: ZeRO-3, whose
    replica is read partition by partition by the engine, not here; shard: the data-parallel wrapper, applied
    last."""
    split = dims.tp > 1 or dims.pp > 1
    if split:
        placed = _split_tensors_and_stages(model, dims, config, weights, device)
    elif dims.cp > 1:
        placed = _context_parallel(model, dims, weights, device)
    elif dims.ep > 1:
        placed = _expert_parallel(model, dims, config, weights, device)
    else:
        placed = _replica(model, weights, device, partitioned_states)
    if not split:
        from backends.parts.activation_checkpointing import apply_activation_checkpointing

        apply_activation_checkpointing(placed.model, config.activation_checkpointing)
    if config.kernels != "eager":
        if split:
            raise UserInputError(f"kernels {config.kernels!r} with tensor or pipeline parallelism is not run here yet")
        from backends.parts.kernels import apply_kernels, compiled_or_eager

        apply_kernels(placed.model, config.kernels, config.device_type)
        if placed.context_parallel is not None:  # its loss is the engine's, outside the model
            placed.context_parallel.token_loss = compiled_or_eager(placed.context_parallel.token_loss, config.kernels)
    if shard is not None:
        placed.model = shard(placed.model)
    return placed


def _split_tensors_and_stages(model, layout: ParallelDims, config: ParallelizeConfig, weights, device) -> Parallelized:
    import torch.distributed as dist

    from backends.model_parallel.split import split_model

    try:
        world = dist.get_world_size()
    except (ValueError, RuntimeError):  # no process group: a single process cannot split the model
        raise UserInputError(
            f"layout tp {layout.tp} x pp {layout.pp} splits the model over {layout.model_parallel} ranks; "
            f"start the script under torchrun --nproc_per_node={layout.model_parallel} (or a multiple)"
        ) from None
    try:
        dims = layout.with_world_size(world)
    except ValueError as error:
        raise UserInputError(str(error)) from None
    parallel_model = split_model(
        model,
        dims,
        activation_checkpointing=config.activation_checkpointing,
        sequence_parallel=config.sequence_parallel,
        stage_split=list(config.stage_split) if config.stage_split else None,
        pipeline_schedule=config.pipeline_schedule,
        virtual_stages=config.virtual_stages,
        device_type=config.device_type,
        expert_capacity_factor=config.expert_capacity_factor,
    )
    if weights is not None:
        from backends.weights.sliced_load import load_parallel_slices

        load_parallel_slices(parallel_model, weights, device)  # every rank's part is filled
    return Parallelized(
        parallel_model,
        parallel_model=parallel_model,
        dp_group=parallel_model.groups.data_parallel_group,  # dp x cp: the ranks holding the same parameters
        expert_parallel=parallel_model.expert_parallel,
        context_parallel=parallel_model.context_parallel,
    )


def _context_parallel(model, layout: ParallelDims, weights, device) -> Parallelized:
    from backends.context_parallel.start import start_context_parallel

    # ZeRO runs on every rank: the cp ranks share the replica's parameters, so no weights are left to read.
    return Parallelized(model, context_parallel=start_context_parallel(model, layout, weights, device))


def _expert_parallel(model, layout: ParallelDims, config: ParallelizeConfig, weights, device) -> Parallelized:
    from backends.expert_parallel.start import start_expert_parallel

    expert_parallel = start_expert_parallel(model, layout, config.expert_capacity_factor, weights, device)
    return Parallelized(model, dp_group=expert_parallel.expert_dp_group, expert_parallel=expert_parallel)


def _replica(model, weights, device, partitioned_states: bool) -> Parallelized:
    from backends.weights.model_init import is_meta, load_full

    if weights is not None and not partitioned_states:
        load_full(model, weights, device)  # ZeRO-0/1/2 hold the whole model in compute on every rank
        weights = None
    elif device is not None and device.type == "cuda" and not is_meta(model):
        model = model.cuda()
    return Parallelized(model, weights)
