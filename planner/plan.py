"""A Plan: one chosen way to train one model on one cluster, with its estimates.

This is the typed object that crosses every boundary after the planner: the
emitters write it out, `backends/` reads it (through engine.json), the
benchmark DB stores it. It is pure data; nothing here imports torch.
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from .cluster import ClusterSpec
from .memory.estimate import MemoryEstimate
from .model_spec import ModelSpec
from .throughput.result import ThroughputEstimate
from .training_config import TrainingConfig

PLAN_SCHEMA_VERSION = 1


class ParallelLayout(BaseModel):
    """dp x tp x pp = world size; TP stays inside a node."""

    model_config = ConfigDict(frozen=True)

    data_parallel: int = Field(ge=1)
    tensor_parallel: int = Field(default=1, ge=1)
    pipeline_parallel: int = Field(default=1, ge=1)

    @property
    def world_size(self) -> int:
        return self.data_parallel * self.tensor_parallel * self.pipeline_parallel


class Plan(BaseModel):
    model_config = ConfigDict(frozen=True)

    schema_version: int = PLAN_SCHEMA_VERSION
    model: ModelSpec
    cluster: ClusterSpec
    config: TrainingConfig
    layout: ParallelLayout
    memory: MemoryEstimate
    throughput: Optional[ThroughputEstimate] = None
    reasons: list[str] = Field(default_factory=list)  # why this plan, in plain sentences
    calibration: Optional[str] = None  # how throughput was calibrated, if at all

    @property
    def global_batch(self) -> int:
        return self.config.micro_batch * self.config.grad_accum * self.layout.data_parallel

    @classmethod
    def layout_for(cls, config: TrainingConfig, world_size: int) -> ParallelLayout:
        return ParallelLayout(
            data_parallel=config.data_parallel_size(world_size),
            tensor_parallel=config.tensor_parallel,
            pipeline_parallel=config.pipeline_parallel,
        )

    def emit(self, directory, *, force: bool = False, nproc_override: int | None = None):
        """Write this plan's run folder (see planner/emit); returns the written paths."""
        from .emit import emit_run_folder  # lazy: planning never needs the emitters

        return emit_run_folder(self, directory, force=force, nproc_override=nproc_override)
