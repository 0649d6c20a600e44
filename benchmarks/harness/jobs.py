"""What the benchmark harness asks of one measurement, and what comes back (no training happens here).

Every measurement runs the project's one runner, `python -m backends.run`,
in a torchrun launch shared by the jobs of its world size (launch.py); this
module only holds the typed job and result that cross that process boundary.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from planner.training_config import TrainingConfig


class MeasureJob(BaseModel):
    key: str
    model: str  # catalog name
    tiny: bool
    gpu: str = "cpu"  # catalog GPU the config was planned for
    config: TrainingConfig
    steps: int = Field(default=8, ge=1)
    warmup: int = Field(default=2, ge=0)
    seed: int = 0


class MeasureResult(BaseModel):
    key: str
    world_size: int
    step_times_s: list[float] = Field(default_factory=list)
    peak_memory_per_rank_bytes: list[int] = Field(default_factory=list)
    memory_kind: str = ""  # "cuda max allocated" or "host peak RSS"
    error: str | None = None
