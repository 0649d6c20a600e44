"""A Plan: one chosen way to train one model on one cluster, with its estimates.

This is the typed object that crosses every boundary after the planner: the
emitters write it out, `backends/` reads it (through engine.json), the
benchmark DB stores it. It is pure data; nothing here imports torch.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from planner.contract.layout import ParallelDims
from planner.contract.schema import SCHEMA_VERSION
from planner.contract.search_restrictions import SearchRestrictions
from planner.hardware.cluster import ClusterSpec
from planner.memory.estimate import MemoryEstimate
from planner.models.spec import ModelSpec
from planner.throughput.result import ThroughputEstimate
from planner.training_config import TrainingConfig


class Plan(BaseModel):
    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    model: ModelSpec
    cluster: ClusterSpec
    config: TrainingConfig
    memory: MemoryEstimate
    throughput: ThroughputEstimate | None = None
    reasons: list[str] = Field(default_factory=list)  # why this plan, in plain sentences
    calibration: str | None = None  # how throughput was calibrated, if at all
    # What the search that found it was kept to: its run folder's run.search, however it is emitted (the CLI,
    # the Python API, tune). Not part of the plan document (plan.json keeps it in the run block).
    search: SearchRestrictions | None = Field(default=None, exclude=True)

    @property
    def layout(self) -> ParallelDims:
        """The config's model-parallel split placed on the cluster: dp is what the split leaves."""
        return self.config.layout.with_world_size(self.cluster.world_size)

    @property
    def global_batch(self) -> int:
        return self.config.micro_batch * self.config.grad_accum * self.layout.data_parallel
