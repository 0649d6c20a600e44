"""engine.json: the EngineConfig our engine (backends/) runs, built as the typed model the engine reads.

The DeepSpeed keys hold the same values ds_config.json would; the
`hardware_selector` block DeepSpeed ignores carries what only our engine
needs: the model's HF config, the device and the ParallelDims layout
(planner/contract/engine_config.py, docs/engine.md).
"""

from __future__ import annotations

from planner.contract.engine_config import EngineConfig
from planner.contract.engine_for_run import engine_config_for_run
from planner.contract.run_config import RunConfig
from planner.plan import Plan
from planner.training_config import Strategy


def engine_config(plan: Plan, run: RunConfig) -> EngineConfig | None:
    """The engine config of this run, or None when the plan runs on another backend."""
    if plan.config.strategy is not Strategy.ENGINE:
        return None
    return engine_config_for_run(plan, run)


def engine_json(plan: Plan, run: RunConfig) -> str | None:
    config = engine_config(plan, run)
    return None if config is None else config.model_dump_json(indent=2, exclude_none=True) + "\n"
