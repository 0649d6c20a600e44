"""Our training engine, DeepSpeed-shaped: `engine, optimizer, _, scheduler = backends.initialize(model=..., config=...)`.

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
    model: Any = None,
    config: Any = None,
    *,
    model_parameters: Any = None,
    optimizer: Any = None,
    lr_scheduler: Any = None,
    metrics_path: str | None = None,
    weights: Any = None,
) -> tuple[Any, Any, None, Any]:
    """(engine, optimizer, None, lr_scheduler) for `model`; config is an engine.json path, a dict or an EngineConfig.

    The optimizer and scheduler come from the config's blocks (as in DeepSpeed's
    config-driven path); passing torch objects instead is not supported.
    weights: a backends.runner.weights.WeightSource when `model` was built on the meta device; each rank
    then reads only the weights it holds (its stage and tensor slice, or its ZeRO-3 partition).
    """
    from planner.contract.engine_config import load_engine_config
    from planner.errors import UserInputError

    from .engine import Engine
    from .runner.model_init import is_meta

    if model is None:
        raise UserInputError("backends.initialize needs model=...")
    if optimizer is not None or lr_scheduler is not None:
        raise UserInputError("give the optimizer and scheduler as blocks of the engine config, not as objects")
    settings = load_engine_config(config if config is not None else {})
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
    parallel_model, dp_group = None, None
    if layout.tp > 1 or layout.pp > 1:
        import torch.distributed as dist

        from .parallelize import parallelize

        if settings.zero_optimization.stage == 3 and layout.pp > 1:
            raise UserInputError(
                "ZeRO-3 does not compose with pipeline parallelism here; use zero stage 1 or 2 with --pp"
            )
        try:
            dims = layout.with_world_size(dist.get_world_size())
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
        )
        if weights is not None:
            from .runner.sliced_load import load_parallel_slices

            load_parallel_slices(parallel_model, weights, device)
            weights = None  # every rank's part is filled; the engine starts from these values
        dp_group = parallel_model.groups.dp_group
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
    engine = Engine(
        model,
        settings,
        dp_group=dp_group,
        parallel_model=parallel_model,
        metrics_path=metrics_path,
        weights=weights,
        device=device,
    )
    return engine, engine.optimizer, None, engine.lr_scheduler
