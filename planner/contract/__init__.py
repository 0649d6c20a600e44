"""The typed contract between the planner and everything that runs a plan (docs/architecture.md).

Pure pydantic, no torch: `backends/` reads a run folder only through these
models, and the emitters write the folder only from them.
"""

from planner.contract.engine_config import EngineConfig, load_engine_config
from planner.contract.layout import ParallelDims
from planner.contract.run_config import RunConfig
from planner.contract.schema import SCHEMA_VERSION

__all__ = ["EngineConfig", "ParallelDims", "RunConfig", "SCHEMA_VERSION", "load_engine_config"]
