"""`backends.initialize(...)`: deepspeed.initialize's arguments in, (engine, optimizer, loader, scheduler) out.

The model is made this rank's part of the layout by the one `parallelize` (backends/parallelize.py: TP ->
CP/EP -> AC -> compile), and the engine's ZeRO then shards the optimizer states over its data-parallel group.
Everything heavy is imported here, on the call, so that `import backends` stays free.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from planner.errors import UserInputError, known_keywords

if TYPE_CHECKING:
    from pathlib import Path

    import torch
    from torch import nn

    from backends.parallelize import Parallelized
    from backends.weights.source import WeightSource
    from planner.contract.engine_config import EngineConfig


@known_keywords
def initialize(
    args: Any = None,
    model: nn.Module | None = None,
    optimizer: Any = None,
    model_parameters: Any = None,
    training_data: Any = None,
    lr_scheduler: Any = None,
    distributed_port: int | None = None,
    mpu: Any = None,
    dist_init_required: bool | None = None,
    collate_fn: Any = None,
    config: str | Path | dict[str, Any] | EngineConfig | None = None,
    mesh_param: Any = None,
    config_params: str | Path | dict[str, Any] | EngineConfig | None = None,
    *,
    metrics_path: str | None = None,
    weights: WeightSource | None = None,
    pipeline: bool | None = None,
) -> tuple[Any, Any, Any, Any]:
    """deepspeed.initialize's arguments and 4-tuple: (engine, optimizer, training dataloader, lr_scheduler).

    config (or config_params, or args.deepspeed_config): an engine.json or ds_config.json path, a dict or
    an EngineConfig. optimizer, lr_scheduler, model_parameters and training_data are read as
    backends/engine/initialize_args.py says; mpu and mesh_param are refused (the engine builds its process
    groups from hardware_selector.layout). distributed_port and dist_init_required are accepted for
    DeepSpeed's signature: torchrun's environment says where to meet.
    weights: a backends.weights.source.WeightSource when `model` was built on the meta device; each rank
    then reads only the weights it holds (its stage and tensor slice, or its ZeRO-3 partition).
    pipeline=True (the seed libraries' argument): the ranks become pipeline stages (initialize_args.py).
    """
    import torch

    from backends.engine.engine import Engine
    from backends.engine.initialize_args import (
        check_argument_types,
        check_model_parameters,
        data_loader,
        scheduler_from,
        with_optimizer_object,
        with_pipeline_flag,
    )
    from backends.weights.model_init import is_meta
    from planner.contract.engine_config import key_fates_line  # pydantic: only on the call

    if isinstance(args, torch.nn.Module):  # initialize(model, config): deepspeed's first positional is args
        raise UserInputError(
            "backends.initialize's first positional argument is args, as in deepspeed.initialize; call "
            "initialize(model=model, config=config) with keywords"
        )
    if model is None:
        raise UserInputError("backends.initialize needs model=...")
    if not isinstance(model, torch.nn.Module):
        raise UserInputError(f"backends.initialize: model must be a torch.nn.Module, not {type(model).__name__}")
    if mpu is not None or mesh_param is not None:
        raise UserInputError("our engine builds its process groups from hardware_selector.layout; drop mpu/mesh_param")
    if hasattr(model_parameters, "__iter__") and not isinstance(model_parameters, (str, bytes)):
        model_parameters = list(model_parameters)  # model.parameters() is a generator, and it is read twice
    check_argument_types(training_data, model_parameters, collate_fn, metrics_path)
    settings = _one_config(
        config=config, config_params=config_params, deepspeed_config=getattr(args, "deepspeed_config", None)
    )
    settings = with_optimizer_object(settings, optimizer, model, "optimizer" in settings.model_fields_set)
    check_model_parameters(model, model_parameters)
    block = settings.hardware_selector
    _init_distributed(block.dist_backend)
    from backends.ranks import rank, world_size

    settings = with_pipeline_flag(settings, pipeline, model, world_size())
    block = settings.hardware_selector
    fates = key_fates_line(settings)  # every key that is not ours (a seed library's, DeepSpeed's), said once
    if fates and rank() == 0:
        print(fates, flush=True)
    device = _device(block.device)
    if is_meta(model) and weights is None:
        raise UserInputError("the model is on the meta device; pass weights=WeightSource(...) to fill it")
    placed = place_model(model, settings, weights, device)
    engine = Engine(
        placed.model,
        settings,
        dp_group=placed.dp_group,
        parallel_model=placed.parallel_model,
        metrics_path=metrics_path,
        weights=placed.weights,
        device=device,
        expert_parallel=placed.expert_parallel,
        context_parallel=placed.context_parallel,
    )
    scheduler = scheduler_from(lr_scheduler, engine)
    return engine, engine.optimizer, data_loader(training_data, engine, collate_fn), scheduler


def _one_config(**given: Any) -> EngineConfig:
    """The one config among initialize's three ways to give it (config, config_params, args.deepspeed_config).
    Two that differ are refused, as DeepSpeed refuses configs given both in args and to initialize ("Not sure how
    to proceed"): whichever won, the other would be silently ignored."""
    from planner.contract.engine_config import load_engine_config

    loaded = {name: load_engine_config(value) for name, value in given.items() if value is not None}
    if not loaded:
        return load_engine_config({})
    (first, settings), *others = loaded.items()
    for name, other in others:
        if other.model_dump() != settings.model_dump():
            where = {"deepspeed_config": "args.deepspeed_config"}
            raise UserInputError(
                f"backends.initialize was given two different configs, {where.get(first, first)} and "
                f"{where.get(name, name)}; pass only one of them"
            )
    return settings


def _init_distributed(backend: str) -> None:
    from backends.distributed_init import init_distributed

    if int(os.environ.get("WORLD_SIZE", "1")) == 1 and "MASTER_ADDR" not in os.environ:
        return
    init_distributed(backend)


def _device(kind: str) -> torch.device:
    import torch

    if kind != "cuda":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UserInputError(
            "the engine config asks for CUDA (hardware_selector.device) and this machine has none; "
            'set "device": "cpu" (gloo) to run on the CPU'
        )
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def place_model(model: nn.Module, settings: EngineConfig, weights: WeightSource | None, device) -> Parallelized:
    """This rank's part of the model, by the layout (backends/parallelize.py); ZeRO then shards its states."""
    from backends.parallelize import ParallelizeConfig, parallelize

    layout = settings.hardware_selector.layout
    zero_stage = settings.zero_optimization.stage
    if zero_stage == 3 and layout.pp > 1:
        raise UserInputError("ZeRO-3 does not compose with pipeline parallelism here; use zero stage 1 or 2 with --pp")
    config = ParallelizeConfig.of_engine(settings)
    return parallelize(model, layout, config, weights=weights, device=device, partitioned_states=zero_stage == 3)
