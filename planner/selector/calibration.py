"""The measured runs that calibrate the selector's answers, as they calibrate `plan` (docs/selector.md).

`hardware-selector plan` rescales its throughput by the benchmark database's records (docs/benchmarks.md,
"Calibration"), and the Python API answers through the same search, so it must read the same records or the two
disagree on one cluster. planner/ never reads the database itself (tests/test_architecture.py: storage sits above
the planner), so the reader is handed in from above: `hardware_selector` installs
benchmarks_db.calibrate.plan_calibration the first time its API is used (as the seed CLI does). planner.selector
imported on its own, without a reader, answers uncalibrated and says so in `calibration`.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from planner.hardware.cluster import ClusterSpec
from planner.models.spec import ModelSpec
from planner.search.candidates import ThroughputAdjust

# (model, cluster, database path or None for the default, how the door spells that path in errors)
#   -> (the search's hook or None, the one line saying how)
CalibrationSource = Callable[
    [ModelSpec, ClusterSpec, "str | os.PathLike[str] | None", str], tuple[ThroughputAdjust | None, str]
]

_installed: list[CalibrationSource] = []  # at most one: the reader `hardware_selector` hands in


def install_calibration_source(source: CalibrationSource) -> None:
    """Make `source` the reader every selector answer calibrates with (replacing any installed before)."""
    _installed[:] = [source]


def calibration_for(
    spec: ModelSpec,
    cluster: ClusterSpec,
    *,
    calibrate: bool,
    db: str | os.PathLike[str] | None,
    turned_off_by: str = "calibrate=False",
    db_named: str = "db=",
) -> tuple[ThroughputAdjust | None, str]:
    """The search's throughput hook for this model and cluster, and the line that says how it was calibrated
    (`turned_off_by`, `db_named`: how the asking door spells calibrate=False and the database's path, e.g. the
    seed CLI's --no-calibration and --db; the reader's errors name the path as the door does)."""
    if not calibrate:
        return None, f"not calibrated ({turned_off_by})"
    if not _installed:
        return None, "not calibrated: no benchmark database reader (import the API from hardware_selector)"
    return _installed[0](spec, cluster, db, db_named)
