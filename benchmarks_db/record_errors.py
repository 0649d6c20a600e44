"""Each record's step time: predicted, after calibration, measured (`hardware-selector db calibration`, plot.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from planner.calibration import Calibration

from .record import RunRecord, RunStatus


class RecordError(BaseModel):
    """One record's step time: predicted, after calibration, measured."""

    model_config = ConfigDict(defer_build=True)  # built on first use: `db calibration` with records

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

    Errors after calibration are in-sample (the corrections were fitted on these records). A record whose
    prediction is an older record's measurement (Calibration.copied) is left out, as the fit leaves it out: its
    "before" would be a copied measurement's error, not the formula's.
    """
    errors = []
    copied = set(calibration.copied)
    for record in records:
        if record.status is not RunStatus.OK or not record.predicted_step_time_s or record.id in copied:
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
