"""One benchmark run as stored in the `runs` table: what ran, where, and how fast.

A RunRecord is the unit of every write (one transaction each), of import and
export, and what the calibration reads (as planner.calibration.MeasuredRun).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timezone
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.calibration import MeasuredRun
from planner.models.spec import ModelSpec
from planner.strategy_family import offload_suffix
from planner.training_config import TrainingConfig


class RunStatus(str, Enum):
    OK = "ok"
    OOM = "oom"
    ERROR = "error"
    TIMEOUT = "timeout"


def needed_by(status: RunStatus) -> str:
    """The column a run of this status must fill, beside the always-required ones: an ok run its measured step
    time, any other its error text. The record checks it; `db import` rejects a file that lacks it."""
    return "step_time_median_s" if status is RunStatus.OK else "error"


def new_run_id() -> str:
    return uuid.uuid4().hex


def utc_now() -> datetime:
    """Naive UTC: DuckDB's TIMESTAMP has no zone, and every stored time is UTC. Microseconds are kept (TIMESTAMP
    holds them): "newest record" decides which measurement of a config the calibration uses, and records made in
    the same second (a quick tune or repeated `train`) would otherwise tie and be ordered by their random ids."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def spec_hash(spec: ModelSpec) -> str:
    """Stable 16-hex digest of a model's architecture and counts (not of its name)."""
    fields = spec.model_dump(mode="json", exclude={"name", "hf_id", "aliases", "origin"})
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return digest[:16]


# Bounds far beyond any real run: a record outside them is a broken measurement (inf, 1e308), and
# one such row must not break calibration for everyone sharing the database (docs/benchmarks.md).
MAX_STEP_S = 1e6  # eleven days for one step
MIN_STEP_S = 1e-6  # a microsecond: no training step is shorter, and a ratio to a denormal overflows
MIN_TOKENS_PER_S = 1e-6
MAX_TOKENS_PER_S = 1e12
MAX_TFLOPS = 1e5
MAX_BYTES = 1 << 60


class RunRecord(BaseModel):
    # Built on first use: `plan` imports it, and makes none when the database has no record of its GPU.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, defer_build=True)

    id: str = Field(default_factory=new_run_id, min_length=1)
    created_at: datetime = Field(default_factory=utc_now)
    host: str
    # hardware
    gpu_name: str
    gpu_count: int = Field(ge=1)  # world size
    nodes: int = Field(default=1, ge=1)
    interconnect: str = "none"
    driver: str | None = None
    # software
    torch_version: str | None = None
    deepspeed_version: str | None = None
    transformers_version: str | None = None
    hardware_selector_version: str | None = None
    # model and config
    model_name: str
    model_spec_hash: str
    tiny: bool = False  # the catalog architecture at tiny sizes (backends.weights.model_factory.tiny_config)
    strategy: str
    config_json: str  # TrainingConfig.model_dump_json()
    micro_batch: int = Field(ge=1)
    grad_accum: int = Field(ge=1)
    global_batch: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    precision: str
    # measured
    step_time_median_s: float | None = Field(default=None, ge=MIN_STEP_S, le=MAX_STEP_S)
    step_time_spread_s: float | None = Field(default=None, ge=0, le=MAX_STEP_S)  # interquartile range
    steps_measured: int | None = Field(default=None, ge=0)
    tokens_per_s: float | None = Field(default=None, ge=MIN_TOKENS_PER_S, le=MAX_TOKENS_PER_S)
    tflops_per_gpu: float | None = Field(default=None, ge=0, le=MAX_TFLOPS)
    mfu: float | None = Field(default=None, ge=0, le=1.0)
    peak_memory_per_rank_bytes: list[int] | None = None
    # the planner's prediction for the same config, at the time of the run
    predicted_step_time_s: float | None = Field(default=None, ge=MIN_STEP_S, le=MAX_STEP_S)
    predicted_tokens_per_s: float | None = Field(default=None, ge=MIN_TOKENS_PER_S, le=MAX_TOKENS_PER_S)
    predicted_peak_memory_bytes: int | None = Field(default=None, ge=0, le=MAX_BYTES)
    prediction_json: str | None = None
    status: RunStatus
    error: str | None = None
    # added by migration 2
    matrix_key: str | None = None  # the benchmark-matrix entry this run measured (resume)
    runner: str | None = None  # which program measured it

    @model_validator(mode="after")
    def _consistent(self) -> RunRecord:
        column = needed_by(self.status)
        if getattr(self, column) in (None, ""):
            raise ValueError(
                f"a run with status '{self.status.value}' needs {column} (its measured step or error text)"
            )
        TrainingConfig.model_validate_json(self.config_json)
        return self

    @property
    def config(self) -> TrainingConfig:
        return TrainingConfig.model_validate_json(self.config_json)

    @property
    def strategy_label(self) -> str:
        """The strategy as `db list` names it: the stored one, with the config's offload suffix when the stored
        name lacks it (`train` stores the plain strategy, and tune stored "zero2" for a ZeRO-2 + offload trial
        before offloading variants were families of their own: planner/strategy_family.py)."""
        suffix = offload_suffix(self.config)
        return self.strategy if not suffix or self.strategy.endswith(suffix) else self.strategy + suffix

    def measured_run(self) -> MeasuredRun:
        """The plain data the planner's calibration reads."""
        return MeasuredRun(
            id=self.id,
            measured_at=self.created_at,
            gpu_name=self.gpu_name,
            world_size=self.gpu_count,
            nodes=self.nodes,
            model_name=self.model_name,
            model_spec_hash=self.model_spec_hash,
            config=self.config,
            ok=self.status is RunStatus.OK,
            step_time_s=self.step_time_median_s,
            tokens_per_s=self.tokens_per_s,
            predicted_step_time_s=self.predicted_step_time_s,
            peak_memory_bytes=max(self.peak_memory_per_rank_bytes) if self.peak_memory_per_rank_bytes else None,
        )
