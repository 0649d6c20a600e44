"""The search's calibration for a training command (plan, plan --clouds, tune): the benchmark database's hook and
line as benchmarks_db/calibrate.py gives them, or "not calibrated" when --no-calibration turns it off
(docs/benchmarks.md, "Calibration"). The database is read only when asked for."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.hardware.cluster import ClusterSpec
    from planner.models.spec import ModelSpec

Calibrated = tuple[Callable | None, str]


def search_calibration(spec: ModelSpec, cluster: ClusterSpec, *, db: str | Path | None, off: bool) -> Calibrated:
    """The search's throughput_adjust hook and the calibration line, one rule for every training command."""
    return cluster_calibration(spec, db=db, off=off)(cluster)


def cluster_calibration(spec: ModelSpec, *, db: str | Path | None, off: bool) -> Callable[[ClusterSpec], Calibrated]:
    """search_calibration for any cluster of this model (an elastic table's node counts), the database read once
    per GPU."""
    if off:
        return lambda cluster: (None, "not calibrated (--no-calibration)")
    from benchmarks_db.calibrate import cluster_calibrations

    return cluster_calibrations(spec, db)
