"""tune's winner timed by its own trial (its search calibrates as `plan`'s does: calibration_hook.py).

The search's predictions ("pred" in tune's table) are `plan`'s: the benchmark database's records replace or
correct them (benchmarks_db/calibrate.py), unless --no-calibration. Once the trials are records, the winner's
step is re-estimated from them, as `plan --emit` after a `train` would give it ("measured: benchmark record
..."), so the winner's plan.json, the next `train`'s comparison and the report page hold what was measured.
A --tiny trial measured the shrunken model: its record calibrates nothing (calibrate.py matches by spec hash).

The `throughput ...` line tune prints with the measured order is read after the trials are stored, for the winner
(a tune of a fresh database would otherwise say "no benchmark database" of the one its trials had just created);
the search's line, said before the trials, is printed beside it when it differs, as what `pred` rests on.
"""

from __future__ import annotations

from planner.calibration import CORRECTED_SOURCES
from planner.calibration_lines import line_for_plan
from planner.plan import Plan

from .calibration_hook import Calibrated


def measured_winner(plan: Plan, calibrated: Calibrated) -> Plan:
    """`plan` with its step time the measured record's, when the database holds one of its config (its trial);
    as it was otherwise (a correction is not applied twice over an estimate it already corrected)."""
    adjust, line = calibrated
    if adjust is None or plan.throughput is None:
        return plan
    estimate = adjust(plan.config, plan.throughput)
    if not estimate.sources.get("step_time_s", "").startswith(CORRECTED_SOURCES[1]):
        return plan
    calibration = line_for_plan(line, plan.cluster.gpu.name, plan.config, estimate)
    return plan.model_copy(update={"throughput": estimate, "calibration": calibration})


def winner_line(plan: Plan, calibrated: Calibrated) -> str:
    """The calibration line for the winner as the database holds it now (`calibrated`: read after the trials):
    plan's line for its best plan (planner/calibration_lines.py), of the winner's estimate as those records give
    it."""
    adjust, line = calibrated
    if adjust is None or plan.throughput is None:
        return line
    estimate = adjust(plan.config, plan.throughput)
    return line_for_plan(line, plan.cluster.gpu.name, plan.config, estimate) or line
