"""A run of a calibrated plan records the formula's prediction, so calibration never compounds.

Found by a new-user audit: `plan --emit` writes the calibrated step (or a measured record's) into plan.json, the
runner stored it as the record's predicted_step_time_s, and the next fit took it for the formula's: each run
weakened the correction (x1.36 where the runs were 1.8-2.6x slower than the formula). The records are made here
through the runner's own path (run_config -> Predicted -> backends/runner/summary.py record()), by PlanRecorder in
this process, from the plans `plan` would make out of the records so far (docs/benchmarks.md, "Calibration").
"""

from __future__ import annotations

import json
import math

import pytest

from benchmarks_db.record import spec_hash
from benchmarks_db.record_errors import record_errors
from benchmarks_db.store import BenchmarkStore
from planner.calibration import Calibration
from planner.evaluate import evaluate
from tests.emit_plans import make_plan

SLOWER = [1.8, 2.6, 2.2]  # each run's measured step over the formula's


def _record(plan, db, step_s: float) -> None:
    from hardware_selector.integrations import PlanRecorder

    recorder = PlanRecorder(plan, record=True, db=db, say=lambda line: None)
    recorder.step_times.values = [step_s] * 4  # set, not timed: the median past the first is step_s
    recorder.steps = 4
    assert recorder.finish() is not None


def test_successive_runs_of_calibrated_plans_fit_the_measurements_against_the_formula(tmp_path):
    db = tmp_path / "runs.duckdb"
    store = BenchmarkStore(db)
    plan = make_plan("gpt2", gpu="cpu", gpus_per_node=1, strategy="ddp", seq_len=64, micro_batch=4, grad_accum=1)
    formula = evaluate(plan.model, plan.config, plan.cluster).throughput
    shape = ("cpu", 1, 1, spec_hash(plan.model))
    said = []
    for index, ratio in enumerate(SLOWER):
        calibration = Calibration.fit([record.measured_run() for record in store.runs()])
        # Run 1: no records, the formula. Run 2: the config was measured, so `plan` says run 1's step. Run 3: a
        # plan corrected by the family's fitted correction (as a sibling config is).
        estimate = calibration.adjuster(*shape, use_measured=index == 1)(plan.config, formula)
        said.append(estimate.step_time_s)
        _record(plan.model_copy(update={"throughput": estimate}), db, ratio * formula.step_time_s)
    assert said[1] == pytest.approx(SLOWER[0] * formula.step_time_s)  # the plans were calibrated
    assert said[2] != pytest.approx(formula.step_time_s)

    records = store.runs()  # (their times may tie to the second: compared as sets)
    assert [record.predicted_step_time_s for record in records] == pytest.approx([formula.step_time_s] * 3)
    # What the plan said is kept beside it, for a reader of the record.
    plans_said = sorted(json.loads(record.prediction_json)["step_time_s"] for record in records)
    assert plans_said == pytest.approx(sorted(said))

    fitted = Calibration.fit([record.measured_run() for record in records])
    (correction,) = fitted.corrections
    # Three records of one config: it counts once, by its newest record (the one a plan of it is given; their
    # times may tie to the second), as that record's measured step over the formula's, never over what a plan
    # said (tests/test_calibration_remeasured.py).
    newest = fitted.measured[0]
    assert (correction.form, correction.records, correction.configs) == ("ratio", 3, 1)
    assert correction.scale == pytest.approx(newest.step_time_s / formula.step_time_s)
    assert any(correction.scale == pytest.approx(ratio) for ratio in SLOWER)
    # `db calibration`'s "before" column is the formula's error.
    errors = record_errors(records, Calibration.fit([record.measured_run() for record in records]))
    assert sorted(error.error_before for error in errors) == pytest.approx(sorted(1 / ratio - 1 for ratio in SLOWER))


def test_a_stored_prediction_that_copies_an_older_measurement_of_the_config_is_left_out_of_the_fit():
    """Records `train` stored before the formula's step was kept: the second run of a measured config carries the
    first's measured step as its prediction, to the last digit. It is told apart and left out of the fit and of
    `db calibration`'s rows; a run of another config predicted at that same figure is not a copy."""
    from datetime import datetime, timedelta, timezone

    from tests.db_samples import sample_record

    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    first = sample_record(created_at=start, predicted_step_time_s=0.01, step_time_median_s=0.02)
    copy = sample_record(created_at=start + timedelta(hours=1), predicted_step_time_s=0.02, step_time_median_s=0.03)
    other = sample_record(
        created_at=start + timedelta(hours=2), micro_batch=4, predicted_step_time_s=0.02, step_time_median_s=0.05
    )
    calibration = Calibration.fit([record.measured_run() for record in (first, copy, other)])
    assert calibration.copied == [copy.id]
    (correction,) = calibration.corrections
    assert correction.records == 2 and correction.scale == pytest.approx(math.sqrt(0.02 / 0.01 * 0.05 / 0.02))
    rows = record_errors([first, copy, other], calibration)
    assert [row.record.id for row in rows] == [first.id, other.id]
    # The newest measurement of the config is still its measured step: only the prediction is dropped.
    assert calibration.measured_run("cpu", 2, 1, "0123abcd", copy.config).id == copy.id
