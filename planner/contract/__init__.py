"""The typed contract between the planner and everything that runs a plan (docs/architecture.md).

Pure pydantic, no torch: `backends/` reads a run folder only through these
models, and the emitters write the folder only from them.
"""

from .engine_config import EngineConfig, load_engine_config
from .layout import ParallelDims
from .run_config import RunConfig
from .schema import SCHEMA_VERSION

__all__ = ["EngineConfig", "ParallelDims", "RunConfig", "SCHEMA_VERSION", "load_engine_config"]
