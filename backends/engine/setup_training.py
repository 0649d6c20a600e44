"""One call from a plan to a training loop: setup_distributed_training, and ParallelTrainer's small loop.

    engine, optimizer, loader, scheduler = setup_distributed_training(model, "runs/x", dataset=data)
    history = ParallelTrainer("runs/x").train(model, data, epochs=1, callbacks={"ceiling": fn})

The config is a run folder or plan.json (its engine config: the plan's
batch split, ZeRO stage, precision, optimizer and clipping; an FSDP plan runs
as the ZeRO stage that shards the same states), a Plan, or an engine /
DeepSpeed config dict or path. Under torchrun the engine joins the process
group; alone it runs in one process. docs/engine.md, "Building blocks".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.contract.engine_config import EngineConfig, load_engine_config, with_changes
from planner.errors import UserInputError, known_keywords
from planner.plan import Plan


def engine_config_of(config: Any) -> EngineConfig:
    """An EngineConfig from a run folder, plan.json, Plan, dict, engine.json / ds_config.json path or EngineConfig."""
    if isinstance(config, (EngineConfig, dict)):
        return load_engine_config(config)
    path = Path(config) if isinstance(config, (str, Path)) else None
    if path is not None and path.suffix == ".json" and path.name != "plan.json":
        return load_engine_config(path)  # an engine.json or a ds_config.json
    if isinstance(config, Plan) or path is not None:
        from planner.rundir.engine_for_run import engine_config_for_run
        from planner.rundir.plan_file import plan_and_run

        plan, run = plan_and_run(config)
        return engine_config_for_run(plan, run)  # an FSDP plan at its sharding's ZeRO stage (zero_stage_of)
    raise UserInputError(
        f"config is a run folder, a plan.json, a Plan, or an engine config (dict or path), not {type(config).__name__}"
    )


@known_keywords
def setup_distributed_training(
    model: Any, config: Any, *, dataset: Any = None, optimizer: Any = None, collate_fn: Any = None
) -> tuple[Any, Any, Any, Any]:
    """(engine, optimizer, dataloader or None, scheduler) for `model` as `config` says."""
    from backends.engine.initialize import initialize

    settings = engine_config_of(config)
    if optimizer is not None:  # the object's hyperparameters replace the config's optimizer block
        settings = with_changes(settings, {"optimizer": None})
    return initialize(model=model, config=settings, optimizer=optimizer, training_data=dataset, collate_fn=collate_fn)


class ParallelTrainer:
    """A small loop over the engine: epochs of the dataset, callbacks asked before each update. Under a pipeline
    layout each step's micro-batches go to the engine's schedule together (engine.train_batch)."""

    @known_keywords
    def __init__(self, config: Any):
        engine_config_of(config)  # a config that cannot be read is said now, not at train()
        self.config = config

    @known_keywords
    def train(
        self,
        model: Any,
        dataset: Any,
        *,
        epochs: int = 1,
        callbacks: dict[str, Any] | None = None,
        optimizer: Any = None,
        collate_fn: Any = None,
    ) -> list[dict[str, float]]:
        """Train; returns one {step, loss, ...} row per optimizer step (the engine's metrics)."""
        if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
            raise ValueError(f"epochs must be a whole number of at least 1, not {epochs!r}")
        if dataset is None or not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise ValueError(f"dataset is a map-style dataset (len and indexing, e.g. a list), not {dataset!r}")
        if callbacks is not None and not isinstance(callbacks, dict):
            raise ValueError(f"callbacks is a dict of name -> callback(metrics, step), not {type(callbacks).__name__}")
        engine, _, loader, _ = setup_distributed_training(
            model, self.config, dataset=dataset, optimizer=optimizer, collate_fn=collate_fn
        )
        for name, fn in (callbacks or {}).items():
            engine.training_monitor.add_callback(name, fn)
        rows: list[dict[str, float]] = []
        pending: list[Any] = []  # a pipelined step's micro-batches: its schedule runs them together
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            for batch in loader:
                if engine.pipelined:
                    pending.append(batch)
                    if len(pending) < engine.grad_accum:
                        continue
                    engine.train_batch(pending)
                    pending = []
                else:
                    engine.backward(engine(batch))
                    engine.step()
                    if engine.micro_steps % engine.grad_accum:
                        continue  # inside an accumulation
                rows.append(engine.monitor.history[-1])
                if engine.should_stop:
                    return rows
        return rows
