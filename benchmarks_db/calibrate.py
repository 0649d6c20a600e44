"""Bridge from the database to the planner's calibration: read records, fit (each record's error: record_errors.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from planner.calibration import Calibration, uncalibrated_summary

from .gpu_index import may_hold_gpu
from .paths import check_db_path, db_origin, resolve_db_path

if TYPE_CHECKING:
    from planner.hardware.cluster import ClusterSpec
    from planner.models.spec import ModelSpec


def load_calibration(db: str | Path | None = None, gpu: str | None = None) -> Calibration:
    """Corrections fitted on every successful record (of one GPU, if given); empty without a database."""
    return _load(db, gpu)[0]


def _load(db: str | Path | None, gpu: str | None, flag_name: str = "--db") -> tuple[Calibration, int]:
    """The calibration, and how many stored records were ignored as non-finite or out of range."""
    from .store import BenchmarkStore

    store = BenchmarkStore(db, flag_name=flag_name)
    runs = [record.measured_run() for record in store.runs(gpu=gpu)] if store.path.exists() else []
    return Calibration.fit(runs), store.skipped_rows


def plan_calibration(
    spec: ModelSpec, cluster: ClusterSpec, db: str | Path | None = None, flag_name: str = "--db"
) -> tuple[Callable | None, str]:
    """The search's throughput_adjust hook for this model and cluster, and the line `plan` prints about it
    (`flag_name`: how the asking door spells the database's path, for its errors: the Python API's db=)."""
    return cluster_calibrations(spec, db, flag_name)(cluster)


def cluster_calibrations(
    spec: ModelSpec, db: str | Path | None = None, flag_name: str = "--db"
) -> Callable[[ClusterSpec], tuple[Callable | None, str]]:
    """plan_calibration for any cluster of this model, the database read once per GPU (an elastic table searches
    every node count of its range: planner/search/elastic.py)."""
    loaded: dict[str, tuple[Calibration, int]] = {}

    def for_cluster(cluster: ClusterSpec) -> tuple[Callable | None, str]:
        path = resolve_db_path(db)
        if not path.exists():
            return None, f"not calibrated: no benchmark database at {path} (fill one with run-training-benchmark --run)"
        # Its index says so: no DuckDB, no record model.
        if not may_hold_gpu(check_db_path(path, db_origin(db, flag_name), flag_name), cluster.gpu.name):
            return None, uncalibrated_summary(cluster.gpu.name, 0)
        from .record import spec_hash

        if cluster.gpu.name not in loaded:
            loaded[cluster.gpu.name] = _load(db, cluster.gpu.name, flag_name)
        calibration, ignored = loaded[cluster.gpu.name]
        shape = (cluster.gpu.name, cluster.world_size, cluster.num_nodes, spec_hash(spec))
        usable = calibration.usable(*shape)
        summary = calibration.summary(cluster.gpu.name, usable)
        if ignored:
            summary += f"; {ignored} stored record(s) ignored (non-finite or out of range)"
        if not calibration.measured or not usable:
            return None, summary
        return calibration.adjuster(*shape), summary

    return for_cluster
