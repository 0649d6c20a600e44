"""The calibration line as it holds for one plan (docs/benchmarks.md, "Calibration"): whether the records moved
its figures, and if not, why (planner/calibration.py fits and applies the corrections)."""

from __future__ import annotations

import re

from planner.calibration import NOT_APPLIED
from planner.contract.sources import CORRECTED_SOURCES
from planner.strategy_family import strategy_family
from planner.throughput.result import ThroughputEstimate
from planner.training_config import TrainingConfig


def is_corrected(estimate: ThroughputEstimate | None) -> bool:
    """Whether the records moved this estimate: rescaled() names a record or a correction as its step's source,
    and every other figure moves with the step."""
    return estimate is not None and estimate.sources.get("step_time_s", "").startswith(CORRECTED_SOURCES)


def line_for_plan(
    line: str | None,
    gpu_name: str,
    config: TrainingConfig,
    estimate: ThroughputEstimate | None,
    corrected_elsewhere: tuple[str, ...] | list[str] = (),
) -> str | None:
    """The calibration line as it holds for one plan (docs/benchmarks.md, "Calibration"). summary() is said
    before the search, for whatever the records could change; a plan none of whose figures they changed (its
    strategy has no correction, or the correction was fitted more than a decade from its step) is not
    calibrated, and the line says why, and which plans it was ranked against the records did move
    (`corrected_elsewhere`: their labels), since those moved the choice."""
    if line is None or not line.startswith("calibrated"):
        return line
    if estimate is None:
        return "not calibrated: this plan has no throughput estimate to calibrate"
    if is_corrected(estimate):
        return line
    refused = next((note for note in estimate.notes if note.startswith(NOT_APPLIED)), None)
    if refused is not None:
        why = refused.removeprefix(NOT_APPLIED)
    else:
        why = f"no record of {strategy_family(config)} on {gpu_name} to fit a correction on, and this config was not measured"
    elsewhere = (
        f"; the records did correct {', '.join(corrected_elsewhere)}, ranked against it" if corrected_elsewhere else ""
    )
    # What the reader said of the database itself (benchmarks_db/calibrate.py: rows it ignored) still holds.
    ignored = re.search(r"; \d+ stored record\(s\) ignored \([^)]*\)$", line)
    return f"not calibrated: {why}{elsewhere}{ignored.group(0) if ignored else ''}"
