"""planner.calibration: fitting corrections, measured replacement, and the plan's summary line."""

from __future__ import annotations

from datetime import datetime

import pytest

from planner.calibration import Calibration, MeasuredRun, fit_correction, rescaled
from planner.calibration_lines import line_for_plan
from planner.throughput.result import StepTimeBreakdown, ThroughputEstimate
from planner.training_config import TrainingConfig


def estimate(step_time_s: float, global_batch: int = 4, seq_len: int = 128) -> ThroughputEstimate:
    tokens = global_batch * seq_len
    return ThroughputEstimate(
        step_time_s=step_time_s,
        tokens_per_s=tokens / step_time_s,
        samples_per_s=global_batch / step_time_s,
        tflops_per_gpu=1.0,
        mfu=0.5,
        hfu=0.5,
        global_batch=global_batch,
        breakdown=StepTimeBreakdown(compute_s=step_time_s * 0.75, exposed_comm_s=step_time_s * 0.25),
        price_usd_per_gpu_hour=0.0,
        sources={"step_time_s": "formula: test"},
    )


def run(
    config: TrainingConfig,
    predicted: float,
    measured: float,
    *,
    day: int = 1,
    gpu: str = "cpu",
    ok: bool = True,
    run_id: str | None = None,
) -> MeasuredRun:
    return MeasuredRun(
        id=run_id or f"{config.strategy.value}{config.micro_batch}{day}{gpu}",
        measured_at=datetime(2026, 11, day),
        gpu_name=gpu,
        world_size=2,
        model_name="gpt2",
        model_spec_hash="abc",
        config=config,
        ok=ok,
        step_time_s=measured if ok else None,
        predicted_step_time_s=predicted,
    )


DDP = [TrainingConfig(strategy="ddp", micro_batch=mb, seq_len=128, precision="fp32") for mb in (1, 2, 4, 8)]
FSDP = [TrainingConfig(strategy="fsdp", micro_batch=mb, seq_len=128, precision="fp32") for mb in (1, 2, 4)]


def test_affine_fit_recovers_overhead_and_scale_exactly():
    runs = [run(c, predicted=p, measured=0.02 + 3.0 * p) for c, p in zip(DDP, (0.001, 0.002, 0.004, 0.008))]
    correction = fit_correction("cpu", "ddp", runs)
    assert correction.form == "affine" and correction.records == 4
    assert correction.overhead_s == pytest.approx(0.02) and correction.scale == pytest.approx(3.0)


def test_two_records_or_a_negative_overhead_fall_back_to_a_ratio():
    two = [run(c, predicted=p, measured=5 * p) for c, p in zip(FSDP, (0.01, 0.04))]
    assert fit_correction("cpu", "fsdp-full", two).form == "ratio"
    assert fit_correction("cpu", "fsdp-full", two).scale == pytest.approx(5.0)
    # measured grows faster than predicted: the affine fit would need a negative overhead
    bent = [run(c, predicted=p, measured=m) for c, p, m in zip(FSDP, (1.0, 2.0, 3.0), (1.0, 3.0, 5.0))]
    correction = fit_correction("cpu", "fsdp-full", bent)
    assert correction.form == "ratio" and correction.scale == pytest.approx((1 * 1.5 * 5 / 3) ** (1 / 3))


def test_calibration_groups_by_gpu_and_strategy_and_skips_failed_runs():
    runs = [run(c, predicted=p, measured=0.02 + 3.0 * p) for c, p in zip(DDP, (0.001, 0.002, 0.004, 0.008))]
    runs += [run(c, predicted=0.01, measured=0.09) for c in FSDP[:1]]
    runs += [run(FSDP[1], predicted=0.01, measured=1.0, ok=False), run(DDP[0], 0.001, 0.5, gpu="A100-80GB")]
    calibration = Calibration.fit(runs)
    assert {(c.gpu, c.family, c.records) for c in calibration.corrections} == {
        ("cpu", "ddp", 4),
        ("cpu", "fsdp-full", 1),
        ("A100-80GB", "ddp", 1),
    }
    corrected = calibration.corrected(estimate(0.005), "CPU", DDP[0].model_copy(update={"micro_batch": 16}))
    assert corrected.step_time_s == pytest.approx(0.035)
    assert corrected.tokens_per_s == pytest.approx(512 / 0.035)
    assert corrected.breakdown.compute_s + corrected.breakdown.exposed_comm_s == pytest.approx(0.035)
    # Found by a new user's audit: a corrected figure said "(4 records)" and named none of them; it names the
    # newest (`db show ID` has the rest of it).
    assert corrected.sources["step_time_s"].startswith(
        "calibration: ddp on cpu: 20 ms + x3 (4 records, newest ddp11cpu)"
    )
    assert calibration.summary("cpu").startswith("calibrated on 5 measured runs for cpu (5 used in corrections")
    assert calibration.summary("H100-80GB").startswith("not calibrated: no benchmark records for H100-80GB")


def test_a_measured_config_gets_its_newest_measured_step_time():
    old = run(DDP[1], predicted=0.002, measured=0.5, day=1, run_id="old0000000")
    new = run(DDP[1], predicted=0.002, measured=0.4, day=9, run_id="new1234567")
    calibration = Calibration.fit([old, new])
    adjust = calibration.adjuster("cpu", world_size=2, nodes=1, spec_hash="abc")
    measured = adjust(DDP[1], estimate(0.002))
    assert measured.step_time_s == 0.4
    # 200x this made-up formula's step: said after the record (tests/test_calibration_siblings.py holds the words)
    assert measured.sources["step_time_s"].startswith("measured: benchmark record new12345 (2026-11-09) (200x ")
    other_model = calibration.adjuster("cpu", world_size=2, nodes=1, spec_hash="other")(DDP[1], estimate(0.002))
    assert other_model.sources["step_time_s"].startswith("calibration:")  # corrected, not replaced
    assert rescaled(estimate(0.1), 0.2, "x", "y").mfu == pytest.approx(0.25)


def test_a_correction_is_not_carried_past_a_decade_of_the_predictions_it_was_fitted_on():
    """The new-user audit's case: records of --tiny runs (predicted ~10 ms, measured 12x that: fixed per-step costs)
    gave a x12.3 ratio, which then multiplied a full-size gpt2's 14 s step into 176 s."""
    tiny = [run(c, predicted=p, measured=12.3 * p) for c, p in zip(FSDP[:2], (0.008, 0.012))]
    calibration = Calibration.fit(tiny)
    (correction,) = calibration.corrections
    assert (correction.predicted_min_s, correction.predicted_max_s) == (0.008, 0.012)
    config = FSDP[2]
    near = calibration.corrected(estimate(0.1), "cpu", config)  # within a decade of 12 ms: corrected
    assert near.step_time_s == pytest.approx(1.23) and near.sources["step_time_s"].startswith("calibration:")
    far = calibration.corrected(estimate(14.3), "cpu", config)  # 14.3 s: more than 10x beyond 12 ms
    assert far.step_time_s == 14.3 and far.sources["step_time_s"] == "formula: test"
    assert far.notes[-1] == (
        "calibration not applied: the correction fsdp-full on cpu: x12.3 (2 records, newest fsdp11cp) was fitted on "
        "predicted steps of 8 ms-12 ms; this plan's 14.3 s is more than 10x outside that range"
    )
    below = calibration.corrected(estimate(0.0007), "cpu", config)  # below a tenth of 8 ms
    assert below.step_time_s == 0.0007
    # the same through the search's hook
    adjusted = calibration.adjuster("cpu", world_size=2, nodes=1, spec_hash="abc")(config, estimate(14.3))
    assert adjusted.step_time_s == 14.3


def test_a_correction_names_the_record_it_was_fitted_on():
    """Found by a new user's audit: after `tune` and `train`, plan's figure said "calibration: ddp on cpu: x1.78
    (1 record)" and named no record; it names it (the newest, when there are several)."""
    one = Calibration.fit([run(DDP[1], predicted=0.09, measured=0.16, run_id="62202bcd8d48")])
    assert one.corrections[0].describe() == "ddp on cpu: x1.78 (1 record: 62202bcd)"
    corrected = one.corrected(estimate(0.09), "cpu", DDP[1])
    assert corrected.sources["step_time_s"] == "calibration: ddp on cpu: x1.78 (1 record: 62202bcd)"


def test_every_number_a_calibration_changes_says_which_record_or_correction_changed_it():
    """Audit: a calibrated plan rescaled compute_s, exposed_comm_s ... and hfu, yet their sources still said formula."""
    before = estimate(0.1)
    before = before.model_copy(
        update={"sources": {key: "formula: test" for key in (*before.model_dump(), "compute_s", "exposed_comm_s")}}
    )
    after = rescaled(before, 0.3, "calibration: ddp on cpu: x3 (record abc12345)", "note")
    old, new = before.model_dump(), after.model_dump()
    changed = [k for k in old if k not in ("breakdown", "sources", "notes") and old[k] != new[k]]
    changed += [k for k, v in old["breakdown"].items() if v != new["breakdown"][k]]
    assert {"step_time_s", "hfu", "compute_s", "exposed_comm_s"} <= set(changed)
    for key in changed:
        assert "record abc12345" in after.sources[key], key


def test_records_that_change_nothing_are_not_said_to_calibrate_the_plan():
    """Audit: with only --tiny records (the shrunken model, no prediction), `plan` said "calibrated on 2 measured
    runs ... newest: record 427a9916" over numbers that were all formula."""
    tiny = [
        run(c, predicted=1.0, measured=0.01, run_id=f"427a991{i}").model_copy(
            update={"predicted_step_time_s": None, "model_spec_hash": "tiny"}
        )
        for i, c in enumerate(DDP[:2])
    ]
    calibration = Calibration.fit(tiny)
    usable = calibration.usable("cpu", world_size=2, nodes=1, spec_hash="abc")
    line = calibration.summary("cpu", usable)
    assert not usable and line.startswith("not calibrated: 2 measured runs for cpu, none usable")
    assert "427a991" not in line
    assert calibration.usable("cpu", world_size=2, nodes=1, spec_hash="tiny")  # the tiny model itself: measured


def test_a_plan_the_records_changed_nothing_of_is_said_not_calibrated_and_why():
    """Audit: the only correction was fitted on predicted steps of 8-12 ms, the plan's step is 14.3 s, so
    EXTRAPOLATION_LIMIT kept it off; the line still said "calibrated on 2 measured runs"."""
    tiny = [run(c, predicted=p, measured=12.3 * p) for c, p in zip(FSDP[:2], (0.008, 0.012))]
    calibration = Calibration.fit(tiny)
    line = calibration.summary("cpu", calibration.usable("cpu", world_size=2, nodes=1, spec_hash="abc"))
    assert line.startswith("calibrated on 2 measured runs for cpu")  # before the search: the records could apply
    far = calibration.corrected(estimate(14.3), "cpu", FSDP[2])
    assert line_for_plan(line, "cpu", FSDP[2], far) == (
        "not calibrated: the correction fsdp-full on cpu: x12.3 (2 records, newest fsdp11cp) was fitted on predicted "
        "steps of 8 ms-12 ms; this plan's 14.3 s is more than 10x outside that range"
    )
    near = calibration.corrected(estimate(0.1), "cpu", FSDP[2])  # within a decade: corrected, the line stands
    assert line_for_plan(line, "cpu", FSDP[2], near) == line
    pooled = calibration.corrected(estimate(0.1), "cpu", DDP[0])  # no ddp record: the pooled correction moved it
    assert pooled.sources["step_time_s"].startswith("calibration: families without records (pooled from fsdp-full)")
    assert line_for_plan(line, "cpu", DDP[0], pooled) == line
    # Records without a prediction fit no correction at all: a config they did not measure is moved by nothing.
    unpredicted = Calibration.fit([r.model_copy(update={"predicted_step_time_s": None}) for r in tiny])
    said = unpredicted.summary("cpu", unpredicted.usable("cpu", world_size=2, nodes=1, spec_hash="abc"))
    assert said.startswith("calibrated on 2 measured runs for cpu")  # a run of this model on this cluster
    plain = unpredicted.corrected(estimate(0.1), "cpu", DDP[0])
    assert line_for_plan(said, "cpu", DDP[0], plain) == (
        "not calibrated: no record of ddp on cpu to fit a correction on, and this config was not measured"
    )
    measured = rescaled(estimate(0.1), 0.2, "measured: benchmark record x", "step time measured")
    assert line_for_plan(line, "cpu", DDP[0], measured) == line
    assert (
        line_for_plan("not calibrated (--no-calibration)", "cpu", DDP[0], plain) == "not calibrated (--no-calibration)"
    )
