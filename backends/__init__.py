"""Our training engine, DeepSpeed-shaped: `engine, optimizer, loader, scheduler = backends.initialize(...)`.

Nothing heavy is imported until initialize() is called, so the planner and
the CLI can import this package for free. `python -m backends.run --plan DIR`
is the runner that trains a run folder with this engine or a peer
(backends/runner, docs/running.md).
"""

from __future__ import annotations

from typing import Any

from backends.engine.initialize import initialize

__all__ = ["initialize", "setup_distributed_training", "ParallelTrainer", "CheckpointManager", "TrainingMonitor",
           "ZeroOptimizer"]  # fmt: skip


# Building blocks for hand-written loops (docs/engine.md, "Building blocks"), imported on first use.
_BLOCKS = {
    "setup_distributed_training": "backends.engine.setup_training",
    "ParallelTrainer": "backends.engine.setup_training",
    "CheckpointManager": "backends.checkpoint.manager",
    "TrainingMonitor": "backends.monitoring.training_monitor",
    "ZeroOptimizer": "backends.zero.standalone",
}


def __getattr__(name: str) -> Any:
    import importlib

    if name in _BLOCKS:
        return getattr(importlib.import_module(_BLOCKS[name]), name)
    if name == "activation_checkpointing":  # a module: activation_checkpointing.apply(model, "full")
        return importlib.import_module("backends.parts.activation_checkpointing")
    raise AttributeError(f"module 'backends' has no attribute '{name}'")
