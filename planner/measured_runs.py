"""The benchmark records a calibration reads (MeasuredRun), and which of them a fit counts: each config once, by
its newest record (newest_per_config), and none whose prediction copies an older record's measurement
(copied_predictions). planner/calibration.py fits and applies the corrections (docs/benchmarks.md, "Calibration")."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from planner.hardware.gpus import normalize_gpu_name
from planner.strategy_family import strategy_family
from planner.training_config import TrainingConfig


class MeasuredRun(BaseModel):
    """One benchmark record, as the calibration needs it."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built on first use: a plan without records makes none

    id: str
    measured_at: datetime
    gpu_name: str
    world_size: int = Field(ge=1)
    nodes: int = Field(default=1, ge=1)
    model_name: str
    model_spec_hash: str
    config: TrainingConfig
    ok: bool
    step_time_s: float | None = Field(default=None, gt=0)
    tokens_per_s: float | None = Field(default=None, gt=0)
    predicted_step_time_s: float | None = Field(default=None, gt=0)
    peak_memory_bytes: int | None = None

    @property
    def family(self) -> str:
        return strategy_family(self.config)

    @property
    def label(self) -> str:
        return f"record {self.id[:8]} ({self.measured_at:%Y-%m-%d})"


def config_key(run: MeasuredRun) -> tuple:
    """What makes two records measurements of one config: the GPU, the cluster, the model and the TrainingConfig."""
    return (
        normalize_gpu_name(run.gpu_name),
        run.world_size,
        run.nodes,
        run.model_spec_hash,
        run.config.model_dump_json(),
    )


def newest_per_config(runs: list[MeasuredRun]) -> tuple[list[MeasuredRun], dict[str, int]]:
    """Each config's newest run (`runs`: any order), and how many of `runs` each stands for (by its id). A config
    measured ten times (ten tunes, say) would otherwise weigh ten times in its family's fit against a config
    measured once; the newest run is the one a plan of that config is given (Calibration.measured_run), and the
    one the sibling rule fits on (docs/benchmarks.md, "Calibration")."""
    newest: dict[tuple, MeasuredRun] = {}
    counts: dict[tuple, int] = {}
    for run in sorted(runs, key=lambda r: r.measured_at, reverse=True):
        key = config_key(run)
        newest.setdefault(key, run)
        counts[key] = counts.get(key, 0) + 1
    return list(newest.values()), {run.id: counts[key] for key, run in newest.items()}


def copied_predictions(runs: list[MeasuredRun]) -> set[str]:
    """Ids of records whose prediction is, to the last digit, an older record's measured step of the same config
    on the same cluster: `train` stored the plan's step as the prediction until the formula's was kept beside it
    (planner/contract/run_config.py Predicted), and a plan of a measured config said that config's newest
    measurement. Fitted, such a record reads as a perfect formula and pulls its correction towards 1 (it
    compounded with each run: docs/benchmarks.md, "Calibration"). A prediction a correction moved is not told
    apart: the formula's step it was scaled from was not stored."""
    seen: dict[tuple, set[float]] = {}
    copied = set()
    for run in sorted(runs, key=lambda r: r.measured_at):  # oldest first: a copy follows what it copies
        steps = seen.setdefault(config_key(run), set())
        if run.predicted_step_time_s is not None and run.predicted_step_time_s in steps:
            copied.add(run.id)
        if run.step_time_s is not None:
            steps.add(run.step_time_s)
    return copied
