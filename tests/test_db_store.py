"""The DuckDB store: schema migrations, round trips, concurrent writers, crash safety."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import duckdb
import pytest

from benchmarks_db.paths import default_db_path
from benchmarks_db.schema import MIGRATIONS, SCHEMA_VERSION, applied_version, migrate
from benchmarks_db.store import BenchmarkStore
from planner.errors import UserInputError
from tests.db_samples import sample_record
from tests.distributed import REPO_ROOT, cpu_env


def test_default_path_follows_xdg_and_env(monkeypatch, tmp_path):
    monkeypatch.delenv("HARDWARE_SELECTOR_DB", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_db_path() == tmp_path / "cache" / "hardware-selector" / "benchmarks.duckdb"
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(tmp_path / "mine.duckdb"))
    assert default_db_path() == tmp_path / "mine.duckdb"
    assert BenchmarkStore().path == tmp_path / "mine.duckdb"
    assert BenchmarkStore(tmp_path / "flag.duckdb").path == tmp_path / "flag.duckdb"


def test_round_trip_and_queries(tmp_path):
    store = BenchmarkStore(tmp_path / "runs.duckdb")
    assert store.runs() == [] and store.count() == 0 and not store.path.exists()  # reading creates nothing
    ok = sample_record()
    oom = sample_record(
        strategy="fsdp-full", status="oom", step_time_median_s=None, error="CUDA out of memory", matrix_key="k-oom"
    )
    store.add(ok)
    store.add(oom)
    assert store.count() == 2
    assert store.get(ok.id[:6]) == ok  # every field, the per-rank list included, survives
    assert [r.id for r in store.runs(strategy="FSDP-FULL")] == [oom.id]
    assert [r.id for r in store.runs(status="ok")] == [ok.id]
    assert store.done_matrix_keys() == {"k-oom"}
    assert store.done_matrix_keys(retry_failed=True) == set()
    with pytest.raises(UserInputError, match="no run with id"):
        store.get("zzz")
    with pytest.raises(duckdb.ConstraintException):  # ids are unique
        store.add(ok)


def test_records_made_in_one_second_come_back_newest_first(tmp_path):
    """ "Newest record" picks which measurement of a config calibrates (docs/benchmarks.md): records made within one
    second (a quick tune, repeated `train`) keep their creation order, not their random ids' order."""
    store = BenchmarkStore(tmp_path / "runs.duckdb")
    made = [sample_record() for _ in range(5)]  # created_at by the default clock, microseconds apart
    for record in (made[2], made[0], made[4], made[1], made[3]):
        store.add(record)
    assert [run.id for run in store.runs()] == [record.id for record in reversed(made)]


def test_old_database_is_migrated_in_place(tmp_path):
    path = tmp_path / "old.duckdb"
    connection = duckdb.connect(str(path))
    assert migrate(connection, target=1) == 1
    old = sample_record()
    version1_columns = [c for c in type(old).model_fields if c not in ("matrix_key", "runner")]
    values = old.model_dump()
    values["status"] = "ok"
    connection.execute(
        f"INSERT INTO runs ({', '.join(version1_columns)}) VALUES ({', '.join('?' for _ in version1_columns)})",
        [values[c] for c in version1_columns],
    )
    connection.close()
    store = BenchmarkStore(path)
    (read,) = store.runs()
    assert read.id == old.id and read.matrix_key is None
    connection = duckdb.connect(str(path), read_only=True)
    assert applied_version(connection) == SCHEMA_VERSION == MIGRATIONS[-1][0] == 2
    connection.close()


WRITER = """
import sys
from benchmarks_db.store import BenchmarkStore
from tests.db_samples import sample_record
store = BenchmarkStore(sys.argv[1])
for index in range(int(sys.argv[2])):
    store.add(sample_record(host=sys.argv[3], matrix_key=f"{sys.argv[3]}-{index}"))
"""


def test_concurrent_writers_are_serialised(tmp_path):
    path = tmp_path / "shared.duckdb"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), "15", f"writer{n}"],
            cwd=REPO_ROOT,
            env=cpu_env(),
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    runs = BenchmarkStore(path).runs()
    assert len(runs) == 30 and len({r.id for r in runs}) == 30
    assert {r.host for r in runs} == {"writer0", "writer1"}


CRASHER = """
import os, signal, sys
from benchmarks_db.store import BenchmarkStore, _INSERT, record_values
from tests.db_samples import sample_record
store = BenchmarkStore(sys.argv[1])
with store.writing() as connection:
    connection.execute("BEGIN TRANSACTION")
    connection.execute(_INSERT, record_values(sample_record(host="crasher")))
    os.kill(os.getpid(), signal.SIGKILL)  # dies inside the transaction, before COMMIT
"""


def test_process_killed_mid_write_leaves_no_partial_row(tmp_path):
    path = tmp_path / "crash.duckdb"
    store = BenchmarkStore(path, lock_timeout_s=10)
    store.add(sample_record(host="before"))
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CRASHER), str(path)],
        cwd=REPO_ROOT,
        env=cpu_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == -9, completed.stderr
    assert [r.host for r in store.runs()] == ["before"]  # and the lock died with the process
    store.add(sample_record(host="after"))
    assert store.count() == 2


def test_another_programs_duckdb_or_a_truncated_one_is_one_line_and_left_untouched(tmp_path):
    foreign = tmp_path / "sales.duckdb"
    connection = duckdb.connect(str(foreign))
    connection.execute("CREATE TABLE sales (x INTEGER)")
    connection.close()
    for action in (lambda store: store.runs(), lambda store: store.add(sample_record())):
        with pytest.raises(UserInputError, match="is another program's DuckDB database \\(tables: sales\\)"):
            action(BenchmarkStore(foreign))
    connection = duckdb.connect(str(foreign), read_only=True)
    assert connection.execute("SHOW TABLES").fetchall() == [("sales",)]  # none of our tables written into it
    connection.close()
    truncated = tmp_path / "truncated.duckdb"
    truncated.write_bytes(foreign.read_bytes()[:5000])
    with pytest.raises(UserInputError, match="truncated.duckdb is a damaged or cut-short DuckDB database"):
        BenchmarkStore(truncated).runs()


def test_a_file_cut_short_past_its_header_is_one_line_at_the_query_too(tmp_path):
    """A new user's audit: a database cut at 300 KB of 1.3 MB opened, then every query raised DuckDB's IOException
    ("Could not read enough bytes"), a traceback in each command and a failed `train` at its record. The query's
    error is the same one line as the opening's; writes to it too."""
    source = BenchmarkStore(tmp_path / "whole.duckdb")
    source.add_many([sample_record() for _ in range(300)])
    cut = tmp_path / "cut.duckdb"
    cut.write_bytes(source.path.read_bytes()[:300_000])
    for action in (lambda store: store.runs(), lambda store: store.add(sample_record()), lambda store: store.count()):
        with pytest.raises(UserInputError, match="cut.duckdb is a damaged or cut-short DuckDB database"):
            action(BenchmarkStore(cut))


def test_a_newer_schema_is_refused_for_writes_as_for_reads(tmp_path):
    """The audit: a file of schema 3 was refused by every read ("upgrade hardware-selector") but `add` (what
    `train` records with) wrote into it."""
    store = BenchmarkStore(tmp_path / "runs.duckdb")
    store.add(sample_record())
    connection = duckdb.connect(str(store.path))
    connection.execute("INSERT INTO schema_migrations (version, description) VALUES (99, 'future')")
    connection.close()
    with pytest.raises(UserInputError, match="has schema version 99, newer than this hardware-selector's"):
        store.add(sample_record())
    connection = duckdb.connect(str(store.path), read_only=True)
    assert connection.execute("SELECT count(*) FROM runs").fetchone()[0] == 1  # nothing written
    connection.close()


def test_another_files_error_inside_a_read_is_not_called_the_databases_damage(tmp_path):
    """A review: the one-line "damaged or cut-short" wrapped every DuckDB IO error in a read or write block, so an
    export's COPY to a folder that is not there blamed the database. Only the database file's own errors are
    said so; another file's reaches its caller as DuckDB raised it."""
    store = BenchmarkStore(tmp_path / "runs.duckdb")
    store.add(sample_record())
    with pytest.raises(duckdb.IOException), store.reading() as connection:
        connection.execute(f"COPY (SELECT 1) TO '{tmp_path / 'missing' / 'x.csv'}' (FORMAT csv)")
    assert store.count() == 1
