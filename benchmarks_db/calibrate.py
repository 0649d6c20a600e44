"""Bridge from the database to the planner's calibration: read records, fit, report errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from benchmarks_db.record import RunStatus
from planner.calibration import Calibration
from planner.hardware.cluster import ClusterSpec
from planner.models.spec import ModelSpec

from .paths import resolve_db_path
from .record import RunRecord, spec_hash
from .store import BenchmarkStore


def load_calibration(db: str | Path | None = None, gpu: str | None = None) -> Calibration:
    """Corrections fitted on every successful record (of one GPU, if given); empty without a database."""
    return _load(db, gpu)[0]


def _load(db: str | Path | None, gpu: str | None) -> tuple[Calibration, int]:
    """The calibration, and how many stored records were ignored as non-finite or out of range."""
    store = BenchmarkStore(db)
    runs = [record.measured_run() for record in store.runs(gpu=gpu)] if store.path.exists() else []
    return Calibration.fit(runs), store.skipped_rows


def plan_calibration(
    spec: ModelSpec, cluster: ClusterSpec, db: str | Path | None = None
) -> tuple[Callable | None, str]:
    """The search's throughput_adjust hook for this model and cluster, and the line `plan` prints about it."""
    path = resolve_db_path(db)
    if not path.exists():
        return None, f"not calibrated: no benchmark database at {path} (fill one with run-training-benchmark --run)"
    calibration, ignored = _load(path, cluster.gpu.name)
    summary = calibration.summary(cluster.gpu.name)
    if ignored:
        summary += f"; {ignored} stored record(s) ignored (non-finite or out of range)"
    if not calibration.measured:
        return None, summary
    adjust = calibration.adjuster(cluster.gpu.name, cluster.world_size, cluster.num_nodes, spec_hash(spec))
    return adjust, summary


class RecordError(BaseModel):
    """One record's step time: predicted, after calibration, measured."""

    model_config = ConfigDict(defer_build=True)  # built on first use: `plan` imports it and makes none

    record: RunRecord
    predicted_s: float
    calibrated_s: float
    measured_s: float

    @property
    def error_before(self) -> float:
        return self.predicted_s / self.measured_s - 1

    @property
    def error_after(self) -> float:
        return self.calibrated_s / self.measured_s - 1


def record_errors(records: list[RunRecord], calibration: Calibration) -> list[RecordError]:
    """Per successful record with a prediction: the error of the raw and of the corrected prediction.

    Errors after calibration are in-sample (the corrections were fitted on these records).
    """
    errors = []
    for record in records:
        if record.status is not RunStatus.OK or not record.predicted_step_time_s:
            continue
        correction = calibration.correction(record.gpu_name, record.config)
        calibrated = correction.apply(record.predicted_step_time_s) if correction else record.predicted_step_time_s
        errors.append(
            RecordError(
                record=record,
                predicted_s=record.predicted_step_time_s,
                calibrated_s=calibrated,
                measured_s=record.step_time_median_s,
            )
        )
    return errors
