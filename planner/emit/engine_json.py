"""engine.json: the EngineConfig our engine (backends/) runs, built as the typed model the engine reads.

The DeepSpeed keys hold the same values ds_config.json would; the
`hardware_selector` block DeepSpeed ignores carries what only our engine
needs: the model's HF config, the device and the ParallelDims layout
(planner/contract/engine_config.py, docs/engine.md).
"""

from __future__ import annotations

from planner.contract.choices import Strategy
from planner.contract.engine_config import EngineConfig
from planner.plan import Plan


def engine_json(plan: Plan, engine: EngineConfig) -> str | None:
    """engine.json's text, or None when the plan runs on another backend."""
    if plan.config.strategy is not Strategy.ENGINE:
        return None
    return engine.model_dump_json(indent=2, exclude_none=True) + "\n"
