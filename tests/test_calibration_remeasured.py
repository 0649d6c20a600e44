"""A config measured many times counts once in its family's correction, by its newest run (planner/calibration.py,
newest_per_config; docs/benchmarks.md, "Calibration").

Found after the closed loop (plan -> tune/train -> records -> calibration) ran a while: every `tune` of a folder
records its trials again, so a config tuned ten times weighed ten times in the GPU-wide family fit against a config
measured once, and the correction drifted towards whatever the re-measured config's ratio was. The references
below are computed by hand: two configs of one family, so the fit is one geometric-mean ratio of the two configs'
newest measured-over-predicted ratios."""

from __future__ import annotations

import math
from datetime import datetime

import pytest

from planner.calibration import Calibration, MeasuredRun
from planner.training_config import TrainingConfig
from tests.test_db_calibration import estimate

TUNED = TrainingConfig(strategy="ddp", micro_batch=1, seq_len=128, precision="fp32")  # measured ten times
ONCE = TrainingConfig(strategy="ddp", micro_batch=2, seq_len=128, precision="fp32")  # measured once


def _run(config: TrainingConfig, measured: float, day: int, run_id: str, predicted: float = 1.0) -> MeasuredRun:
    return MeasuredRun(id=run_id, measured_at=datetime(2026, 11, day), gpu_name="cpu", world_size=2,
                       model_name="gpt2", model_spec_hash="abc", config=config, ok=True, step_time_s=measured,
                       predicted_step_time_s=predicted)  # fmt: skip


def _records() -> list[MeasuredRun]:
    # Nine old tunes measured the tuned config 3x slower than the formula, the newest 2x; the other config, 4x.
    tunes = [_run(TUNED, 3.0, day, f"tune{day:06d}") for day in range(1, 10)]
    return [*tunes, _run(TUNED, 2.0, 10, "tune000010"), _run(ONCE, 4.0, 5, "once000005")]


def test_a_config_measured_ten_times_counts_once_by_its_newest_run():
    calibration = Calibration.fit(_records())
    (ddp,) = calibration.corrections
    # By hand: one ratio per config, the newest of each: sqrt(2 x 4) = 2.828... Counting every record gave
    # exp((9 ln 3 + ln 2 + ln 4) / 11) = 2.966..., the tuned config's 3x ten times over.
    assert ddp.form == "ratio"
    assert ddp.scale == pytest.approx(math.sqrt(2.0 * 4.0))
    assert ddp.scale != pytest.approx(math.exp((9 * math.log(3) + math.log(2) + math.log(4)) / 11))
    assert (ddp.records, ddp.configs) == (11, 2)
    assert sorted(calibration.superseded) == [f"tune{day:06d}" for day in range(1, 10)]
    # The pooled correction (for families without records) counts each config once too.
    (pooled,) = calibration.pooled
    assert pooled.scale == pytest.approx(math.sqrt(8.0))
    # A plan of a third split of that family is corrected by that ratio.
    other = TUNED.model_copy(update={"micro_batch": 4})
    assert calibration.corrected(estimate(1.0), "cpu", other).step_time_s == pytest.approx(math.sqrt(8.0))


def test_the_lines_say_how_many_runs_of_how_many_configs():
    calibration = Calibration.fit(_records())
    described = calibration.corrections[0].describe()
    assert described == "ddp on cpu: x2.83 (11 records of 2 configs, newest tune0000)", described
    line = calibration.summary("cpu")
    assert line.startswith(
        "calibrated on 11 measured runs of 2 configs for cpu (2 configs used in corrections, each once by its "
        "newest run: ddp on cpu: x2.83 (11 records of 2 configs, newest tune0000)"
    ), line
    # Each config measured once: the line is as it always was.
    once = Calibration.fit([_run(TUNED, 2.0, 10, "tune000010"), _run(ONCE, 4.0, 5, "once000005")])
    assert once.summary("cpu").startswith("calibrated on 2 measured runs for cpu (2 used in corrections: ddp on cpu:")
    assert once.corrections[0].describe() == "ddp on cpu: x2.83 (2 records, newest tune0000)"


def test_db_calibration_says_the_counts(tmp_path, capsys):
    """`db calibration` lists every record, and says which runs the corrections left out as re-measured."""
    from benchmarks_db.store import BenchmarkStore
    from hardware_selector_cli.app import main
    from tests.db_samples import sample_record

    store = BenchmarkStore(tmp_path / "db.duckdb")
    config = TUNED.model_copy(update={"micro_batch": 2})
    store.add_many(
        [
            sample_record(created_at=datetime(2026, 11, day), predicted_step_time_s=0.01, step_time_median_s=step,
                          config_json=config.model_dump_json())
            for day, step in ((1, 0.03), (2, 0.03), (3, 0.02))
        ]
    )  # fmt: skip
    assert main(["db", "calibration", "--db", str(store.path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "correction ddp on cpu: x2 (3 records of 1 config, newest" in out, out
    assert (
        "2 older records of re-measured configs are listed but not fitted: each config counts once in the "
        "corrections, by its newest run (3 runs of 1 config:" in out
    ), out
    # The mean error is over the fitted run (0.01 s predicted, 0.02 s measured; x2 after), not the three listed
    # (61% before, 22% after).
    assert "mean |error|: 50% before, 0% after calibration (over the 1 run fitted, in-sample:" in out, out
