"""Our training engine, DeepSpeed-shaped: `engine, optimizer, loader, scheduler = backends.initialize(...)`.

Nothing heavy is imported until initialize() is called, so the planner and
the CLI can import this package for free. `python -m backends.run --plan DIR`
is the runner that trains a run folder with this engine or a peer
(backends/runner, docs/running.md).
"""

from __future__ import annotations

import os
from typing import Any


def _init_distributed(backend: str) -> None:
    from .distributed_init import init_distributed

    if int(os.environ.get("WORLD_SIZE", "1")) == 1 and "MASTER_ADDR" not in os.environ:
        return
    init_distributed(backend)


def initialize(
    args: Any = None,
    model: Any = None,
    optimizer: Any = None,
    model_parameters: Any = None,
    training_data: Any = None,
    lr_scheduler: Any = None,
    distributed_port: Any = None,
    mpu: Any = None,
    dist_init_required: Any = None,
    collate_fn: Any = None,
    config: Any = None,
    mesh_param: Any = None,
    config_params: Any = None,
    *,
    metrics_path: str | None = None,
    weights: Any = None,
) -> tuple[Any, Any, Any, Any]:
    """deepspeed.initialize's arguments and 4-tuple: (engine, optimizer, training dataloader, lr_scheduler).

    config (or config_params, or args.deepspeed_config): an engine.json or ds_config.json path, a dict or
    an EngineConfig. optimizer, lr_scheduler, model_parameters and training_data are read as
    backends/initialize_args.py says; mpu and mesh_param are refused (the engine builds its process
    groups from hardware_selector.layout).
    weights: a backends.runner.weights.WeightSource when `model` was built on the meta device; each rank
    then reads only the weights it holds (its stage and tensor slice, or its ZeRO-3 partition).
    """
    from planner.contract.engine_config import load_engine_config
    from planner.errors import UserInputError

    from .engine import Engine
    from .initialize_args import check_model_parameters, data_loader, scheduler_from, with_optimizer_object
    from .runner.model_init import is_meta

    if model is None:
        raise UserInputError("backends.initialize needs model=...")
    if mpu is not None or mesh_param is not None:
        raise UserInputError("our engine builds its process groups from hardware_selector.layout; drop mpu/mesh_param")
    if config is None:
        config = config_params if config_params is not None else getattr(args, "deepspeed_config", None)
    settings = load_engine_config(config if config is not None else {})
    settings = with_optimizer_object(settings, optimizer, model, "optimizer" in settings.model_fields_set)
    check_model_parameters(model, model_parameters)
    block = settings.hardware_selector
    _init_distributed(block.dist_backend)
    import torch

    device = torch.device("cpu")
    if block.device == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    if is_meta(model) and weights is None:
        raise UserInputError("the model is on the meta device; pass weights=WeightSource(...) to fill it")
    layout = block.layout
    parallel_model, dp_group, expert_parallel, context_parallel = None, None, None, None
    if layout.cp > 1 and layout.tp == 1 and layout.pp == 1:  # with tp, parallelize splits the sequences
        from .context_parallel.start import start_context_parallel

        context_parallel = start_context_parallel(model, settings, weights, device)
        weights = None  # ZeRO runs on every rank: the cp ranks share the replica's parameters
    elif layout.ep > 1 and layout.tp == 1 and layout.pp == 1:  # with tp, parallelize splits the experts
        from .expert_parallel.start import start_expert_parallel

        expert_parallel = start_expert_parallel(model, settings, weights, device)
        weights, dp_group = None, expert_parallel.expert_dp_group
    elif layout.tp > 1 or layout.pp > 1:
        import torch.distributed as dist

        from .parallelize import parallelize

        if settings.zero_optimization.stage == 3 and layout.pp > 1:
            raise UserInputError(
                "ZeRO-3 does not compose with pipeline parallelism here; use zero stage 1 or 2 with --pp"
            )
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
        parallel_model = parallelize(
            model,
            dims,
            activation_checkpointing=block.activation_checkpointing,
            sequence_parallel=block.sequence_parallel,
            stage_split=layout.stage_layers,
            pipeline_schedule=block.pipeline_schedule,
            virtual_stages=layout.virtual_stages,
            device_type=block.device,  # parallelize shards on the host, then moves only this rank's part
            expert_capacity_factor=block.expert_capacity_factor,
        )
        if weights is not None:
            from .runner.sliced_load import load_parallel_slices

            load_parallel_slices(parallel_model, weights, device)
            weights = None  # every rank's part is filled; the engine starts from these values
        dp_group = parallel_model.groups.data_parallel_group  # dp x cp: the ranks holding the same parameters
        context_parallel, expert_parallel = parallel_model.context_parallel, parallel_model.expert_parallel
        model = parallel_model
    else:
        from .activation_checkpointing import apply_activation_checkpointing

        if weights is not None and settings.zero_optimization.stage < 3:
            from .runner.model_init import load_full

            load_full(model, weights, device)  # ZeRO-0/1/2 hold the whole model in compute on every rank
            weights = None
        elif block.device == "cuda" and not is_meta(model):
            model = model.cuda()
        apply_activation_checkpointing(model, block.activation_checkpointing)
    if block.kernels != "eager":
        if parallel_model is not None:
            raise UserInputError(f"kernels {block.kernels!r} with tensor or pipeline parallelism is not run here yet")
        from .kernels import apply_kernels

        apply_kernels(model, block.kernels, device.type)
    engine = Engine(
        model,
        settings,
        dp_group=dp_group,
        parallel_model=parallel_model,
        metrics_path=metrics_path,
        weights=weights,
        device=device,
        expert_parallel=expert_parallel,
        context_parallel=context_parallel,
    )
    scheduler = scheduler_from(lr_scheduler, engine)
    return engine, engine.optimizer, data_loader(training_data, engine, collate_fn), scheduler


# Building blocks for hand-written loops (docs/engine.md, "Building blocks"), imported on first use.
_BLOCKS = {
    "setup_distributed_training": "backends.setup_training",
    "ParallelTrainer": "backends.setup_training",
    "CheckpointManager": "backends.checkpoint.manager",
    "TrainingMonitor": "backends.monitoring",
    "ZeroOptimizer": "backends.zero.standalone",
}


def __getattr__(name: str) -> Any:
    if name in _BLOCKS:
        import importlib

        return getattr(importlib.import_module(_BLOCKS[name]), name)
    raise AttributeError(f"module 'backends' has no attribute '{name}'")
