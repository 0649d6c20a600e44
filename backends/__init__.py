"""Our training engine, DeepSpeed-shaped: `engine, optimizer, _, scheduler = backends.initialize(model=..., config=...)`.

Nothing heavy is imported until initialize() is called, so the planner and
the CLI can import this package for free.
"""

from __future__ import annotations

import os
from typing import Any, Optional


def _init_distributed(backend: str) -> None:
    from .distributed_init import init_distributed

    if int(os.environ.get("WORLD_SIZE", "1")) == 1 and "MASTER_ADDR" not in os.environ:
        return
    init_distributed(backend)


def initialize(model: Any = None, config: Any = None, *, model_parameters: Any = None, optimizer: Any = None,
               lr_scheduler: Any = None, metrics_path: Optional[str] = None) -> tuple[Any, Any, None, Any]:
    """(engine, optimizer, None, lr_scheduler) for `model`; config is an engine.json path, a dict or an EngineConfig.

    The optimizer and scheduler come from the config's blocks (as in DeepSpeed's
    config-driven path); passing torch objects instead is not supported.
    """
    from planner.errors import UserInputError

    from .config import load_engine_config
    from .engine import Engine

    if model is None:
        raise UserInputError("backends.initialize needs model=...")
    if optimizer is not None or lr_scheduler is not None:
        raise UserInputError("give the optimizer and scheduler as blocks of the engine config, not as objects")
    settings = load_engine_config(config if config is not None else {})
    block = settings.hardware_selector
    _init_distributed(block.dist_backend)
    if block.device == "cuda":
        import torch

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    layout = block.layout
    parallel_model, dp_group = None, None
    if layout.tensor_parallel > 1 or layout.pipeline_parallel > 1:
        import torch.distributed as dist

        from .parallel_dims import ParallelDims
        from .parallelize import parallelize

        if settings.zero_optimization.stage == 3 and layout.pipeline_parallel > 1:
            raise UserInputError("ZeRO-3 does not compose with pipeline parallelism here; use zero stage 1 or 2 with --pp")
        model_parallel = layout.tensor_parallel * layout.pipeline_parallel
        dims = ParallelDims(dp=dist.get_world_size() // model_parallel, tp=layout.tensor_parallel,
                            pp=layout.pipeline_parallel)
        parallel_model = parallelize(
            model, dims, activation_checkpointing=block.activation_checkpointing,
            sequence_parallel=layout.sequence_parallel, stage_split=layout.stage_split,
            pipeline_schedule=layout.pipeline_schedule, virtual_stages=layout.virtual_stages,
            device_type=block.device,  # parallelize shards on the host, then moves only this rank's part
        )
        dp_group = parallel_model.groups.dp_group
        model = parallel_model
    else:
        from .activation_checkpointing import apply_activation_checkpointing

        if block.device == "cuda":
            model = model.cuda()
        apply_activation_checkpointing(model, block.activation_checkpointing)
    engine = Engine(model, settings, dp_group=dp_group, parallel_model=parallel_model, metrics_path=metrics_path)
    return engine, engine.optimizer, None, engine.lr_scheduler
