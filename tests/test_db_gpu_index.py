"""The GPU index beside a benchmark database (benchmarks_db/gpu_index.py): trusted only while it describes the file
exactly, and never changing what `plan` is calibrated on."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import duckdb
import pytest

from benchmarks_db.calibrate import plan_calibration
from benchmarks_db.gpu_index import file_state, index_path
from benchmarks_db.store import COLUMNS, BenchmarkStore, record_values
from planner.hardware.cluster import make_cluster
from planner.models.resolve import resolve_model
from planner.training_config import TrainingConfig
from tests.db_samples import sample_record
from tests.distributed import REPO_ROOT, cpu_env
from tests.test_db_poisoned import _poison


def _store(tmp_path, gpus=("cpu",)) -> BenchmarkStore:
    """Three records per GPU (step = 10 ms + 4 x predicted, as tests/test_db_cli.py's) and a failed one."""
    store = BenchmarkStore(tmp_path / "runs.duckdb")
    store.add_many(
        [
            sample_record(
                gpu_name=gpu, micro_batch=mb, predicted_step_time_s=0.001 * mb, step_time_median_s=0.01 + 0.004 * mb
            )
            for gpu in gpus
            for mb in (1, 2, 4)
        ]
    )
    store.add(sample_record(status="oom", step_time_median_s=None, error="out of memory", strategy="fsdp-full"))
    return store


def _index(store: BenchmarkStore) -> dict:
    return json.loads(index_path(store.path).read_text())


def _say_no_gpus(store: BenchmarkStore, **database_changes: int) -> None:
    """Overwrite the index to claim the database holds no record, for the file as it is or with its recorded
    size, mtime or inode changed."""
    document = _index(store)
    state = file_state(store.path)
    assert state is not None
    fields = ["size", "mtime_ns", "inode"]
    for name, delta in database_changes.items():
        state[fields.index(name)] += delta
    document.update(database=state, gpus=[])
    index_path(store.path).write_text(json.dumps(document))


def test_every_write_leaves_an_index_of_the_stored_gpus(tmp_path):
    store = _store(tmp_path, gpus=("cpu", "A100-80GB"))
    assert _index(store)["gpus"] == ["a100-80gb", "cpu"] and _index(store)["database"] == file_state(store.path)
    store.add(sample_record(gpu_name="H100-80GB"))
    assert _index(store)["gpus"] == ["a100-80gb", "cpu", "h100-80gb"]
    assert [r.gpu_name for r in store.runs(gpu="h100-80gb")] == ["H100-80GB"]  # the SQL filter ignores case too


def test_an_index_that_matches_the_file_is_trusted(tmp_path):
    """The check below it can fail: an index claiming no GPUs for the file as it is hides the records."""
    store = _store(tmp_path)
    _say_no_gpus(store)
    assert store.runs(gpu="cpu") == []


@pytest.mark.parametrize("changed", [{"size": 1}, {"mtime_ns": -1}, {"inode": 1}])
def test_an_index_of_another_size_mtime_or_inode_is_never_trusted_and_is_rewritten(tmp_path, changed):
    store = _store(tmp_path)
    _say_no_gpus(store, **changed)
    assert len(store.runs(gpu="cpu")) == 3 + 1  # read from DuckDB, the failed record too
    assert _index(store)["gpus"] == ["cpu"] and _index(store)["database"] == file_state(store.path)


@pytest.mark.parametrize("damage", ["{", '{"version": 99}', "[]", '"gpus"'])
def test_a_damaged_or_foreign_index_is_read_past(tmp_path, damage):
    store = _store(tmp_path)
    index_path(store.path).write_text(damage)
    assert len(store.runs(gpu="cpu")) == 4
    assert _index(store)["gpus"] == ["cpu"]


def test_a_write_by_another_program_or_a_pending_log_outdates_the_index(tmp_path):
    store = _store(tmp_path)
    before = _index(store)
    # The duckdb CLI (or any program) adds an H100 record without our store: the file changes under the index.
    connection = duckdb.connect(str(store.path))
    added = sample_record(gpu_name="H100-80GB")
    connection.execute(f"INSERT INTO runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                       record_values(added))  # fmt: skip
    connection.close()
    assert _index(store) == before  # stale, not yet rewritten
    assert [r.id for r in store.runs(gpu="H100-80GB")] == [added.id]
    assert _index(store)["gpus"] == ["cpu", "h100-80gb"]
    # Rows waiting in DuckDB's write-ahead log are not in the file the index describes.
    _say_no_gpus(store)
    wal = store.path.with_name(store.path.name + ".wal")
    wal.write_bytes(b"")
    assert file_state(store.path) is None
    assert len(store.runs(gpu="cpu")) == 4


def _calibration(store: BenchmarkStore, gpu: str) -> tuple[str, float | None]:
    spec = resolve_model("gpt2")
    cluster = make_cluster(gpu, gpus_per_node=2, nodes=1)
    adjust, summary = plan_calibration(spec, cluster, store.path)
    if adjust is None:
        return summary, None
    from tests.test_db_calibration import estimate

    config = TrainingConfig(strategy="ddp", micro_batch=8, seq_len=128, precision="fp32")
    return summary, adjust(config, estimate(0.002)).step_time_s


@pytest.mark.parametrize("gpu", ["cpu", "CPU", "H100-80GB"])
def test_calibration_is_the_same_with_the_index_as_from_duckdb(tmp_path, gpu):
    store = _store(tmp_path)
    _poison(store, step_time_median_s=float("nan"))  # a cpu record the calibration ignores, and says so
    index_path(store.path).unlink()
    from_duckdb = _calibration(store, gpu)  # the read before the index existed (it writes one)
    assert index_path(store.path).exists()
    assert _calibration(store, gpu) == from_duckdb
    if gpu == "H100-80GB":
        assert from_duckdb == ("not calibrated: no benchmark records for H100-80GB (0 records read)", None)
    else:
        assert from_duckdb[0].startswith("calibrated on 3 measured runs for") and from_duckdb[1] is not None
        assert "1 stored record(s) ignored" in from_duckdb[0]


PROBE = """
import json, sys
from hardware_selector import main
code = main({argv!r})
print(json.dumps({{"code": code, "duckdb": "duckdb" in sys.modules}}), file=sys.stderr)
"""


def _plan_in_a_fresh_process(store: BenchmarkStore, gpu: str) -> tuple[dict, bool]:
    argv = ["plan", "--model", "gpt2", "--gpu", gpu, "--gpus-per-node", "2", "--seq-len", "128", "--json"]
    completed = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)],
        cwd=REPO_ROOT,
        env=cpu_env({"HARDWARE_SELECTOR_DB": str(store.path)}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(completed.stderr.strip().splitlines()[-1])
    assert report["code"] == 0, completed.stderr
    return json.loads(completed.stdout), report["duckdb"]


def test_plan_imports_no_duckdb_when_the_index_holds_no_record_of_its_gpu(tmp_path):
    store = _store(tmp_path)
    plan, imported = _plan_in_a_fresh_process(store, "H100-80GB")
    assert not imported
    assert plan["best"]["calibration"] == "not calibrated: no benchmark records for H100-80GB (0 records read)"
    plan, imported = _plan_in_a_fresh_process(store, "cpu")  # its records: read from DuckDB
    # Read from DuckDB: the line names their correction (fitted on 1-4 ms steps, so not applied to this plan's).
    assert imported and plan["best"]["calibration"].startswith("not calibrated: the correction ddp on cpu: 10 ms + x4")
    os.utime(store.path)  # touched: the index no longer describes the file
    plan, imported = _plan_in_a_fresh_process(store, "H100-80GB")
    assert imported
