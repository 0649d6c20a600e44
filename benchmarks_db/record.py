"""One benchmark run as stored in the `runs` table: what ran, where, and how fast.

A RunRecord is the unit of every write (one transaction each), of import and
export, and what the calibration reads (as planner.calibration.MeasuredRun).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

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
MAX_INT_COLUMN = 2**31 - 1  # the table's INTEGER columns are 32-bit: a larger count is refused here, not by DuckDB
# A record dated later than this past the present is a clock's or an editor's error, and would stay "newest".
FUTURE_SLACK = timedelta(days=1)

PeakBytes = Annotated[int, Field(ge=0, le=MAX_BYTES)]


def measured_rates(tflops_per_gpu: float, mfu: float, predicted_step_s: float, median_s: float) -> dict[str, float]:
    """The prediction's FLOP rate and MFU over the measured step, or nothing where that passes the GPU's peak
    (mfu > 1): the plan's step was not what ran, or the catalog's peak (a CPU's, say) is too low. The rate is then
    not stored, the measured step time still is: a record must never fail the run that made it (`train` and the
    benchmark matrix alike; a matrix on a core faster than the catalog's crashed and recorded nothing)."""
    measured_mfu = mfu * predicted_step_s / median_s
    if measured_mfu > 1.0:
        return {}
    return {"tflops_per_gpu": tflops_per_gpu * predicted_step_s / median_s, "mfu": measured_mfu}


class RunRecord(BaseModel):
    # Built on first use: `plan` imports it, and makes none when the database has no record of its GPU.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, defer_build=True)

    id: str = Field(default_factory=new_run_id, min_length=1)
    created_at: datetime = Field(default_factory=utc_now)
    host: str
    # hardware
    gpu_name: str
    gpu_count: int = Field(ge=1, le=MAX_INT_COLUMN)  # world size
    nodes: int = Field(default=1, ge=1, le=MAX_INT_COLUMN)
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
    micro_batch: int = Field(ge=1, le=MAX_INT_COLUMN)
    grad_accum: int = Field(ge=1, le=MAX_INT_COLUMN)
    global_batch: int = Field(ge=1, le=MAX_INT_COLUMN)
    seq_len: int = Field(ge=1, le=MAX_INT_COLUMN)
    precision: str
    # measured
    step_time_median_s: float | None = Field(default=None, ge=MIN_STEP_S, le=MAX_STEP_S)
    step_time_spread_s: float | None = Field(default=None, ge=0, le=MAX_STEP_S)  # interquartile range
    steps_measured: int | None = Field(default=None, ge=0, le=MAX_INT_COLUMN)
    tokens_per_s: float | None = Field(default=None, ge=MIN_TOKENS_PER_S, le=MAX_TOKENS_PER_S)
    tflops_per_gpu: float | None = Field(default=None, ge=0, le=MAX_TFLOPS)
    mfu: float | None = Field(default=None, ge=0, le=1.0)
    peak_memory_per_rank_bytes: list[PeakBytes] | None = None
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
        try:
            TrainingConfig.model_validate_json(self.config_json)
        except ValidationError as error:  # named by its column: "Invalid JSON: EOF while parsing" said nothing
            first = error.errors()[0]
            where = ".".join(str(part) for part in first.get("loc", ()))
            raise ValueError(f"config_json: {where + ': ' if where else ''}{first['msg']}") from None
        return self

    def check_importable(self) -> None:
        """What `db import` refuses beside the validation every stored row passes (a row an older version stored
        stays readable): a date in the future, which would stand as the newest measurement for good, and a
        prediction that is no JSON object (an audit's rows; `db show` then crashed)."""
        if self.prediction_json is not None and not isinstance(_json_object(self.prediction_json), dict):
            raise ValueError("prediction_json must be a JSON object (the prediction the run was compared with)")
        created = self.created_at
        if created.tzinfo is not None:  # stored naive in UTC (utc_now); an aware time is compared as UTC
            created = created.astimezone(timezone.utc).replace(tzinfo=None)
        if created > utc_now() + FUTURE_SLACK:
            raise ValueError(f"created_at {created:%Y-%m-%d} is in the future; a record is dated when it ran")

    @property
    def config(self) -> TrainingConfig:
        """The config that ran: config_json with the batch split and length of the columns, which say what ran
        (the Trainer, Lightning and own-loop doors stored their framework's micro-batch in the column beside the
        plan's in config_json; a review found the calibration crediting it to the plan's)."""
        stored = TrainingConfig.model_validate_json(self.config_json)
        return stored.model_copy(
            update={"micro_batch": self.micro_batch, "grad_accum": self.grad_accum, "seq_len": self.seq_len}
        )

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


def _json_object(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        raise ValueError("prediction_json is not JSON (the prediction the run was compared with)") from None
