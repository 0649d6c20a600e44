"""A Plan: one chosen way to train one model on one cluster, with its estimates.

This is the typed object that crosses every boundary after the planner: the
emitters write it out, `backends/` reads it (through engine.json), the
benchmark DB stores it. It is pure data; nothing here imports torch.
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from planner.hardware.cluster import ClusterSpec
from planner.contract.layout import ParallelDims
from planner.contract.schema import SCHEMA_VERSION
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
    layout: ParallelDims
    memory: MemoryEstimate
    throughput: Optional[ThroughputEstimate] = None
    reasons: list[str] = Field(default_factory=list)  # why this plan, in plain sentences
    calibration: Optional[str] = None  # how throughput was calibrated, if at all

    @property
    def global_batch(self) -> int:
        return self.config.micro_batch * self.config.grad_accum * self.layout.dp

    @classmethod
    def layout_for(cls, config: TrainingConfig, world_size: int) -> ParallelDims:
        pp = config.pipeline_parallel
        return ParallelDims(
            dp=config.data_parallel_size(world_size),
            tp=config.tensor_parallel,
            pp=pp,
            ep=config.expert_parallel,
            virtual_stages=config.virtual_stages if pp > 1 else 1,
        )

    def emit(self, directory, *, force: bool = False, nproc_override: int | None = None, options=None):
        """Write this plan's run folder (see planner/emit); options: a planner.emit.RunOptions."""
        from planner.emit import emit_run_folder  # lazy: planning never needs the emitters

        return emit_run_folder(self, directory, force=force, nproc_override=nproc_override, options=options)
