"""One bad row must not break planning for everyone sharing the benchmark database (docs/errors.md).

References: the record's own bounds (benchmarks_db/record.py: finite, and
below limits no real run reaches) and the planner's answer without the bad
rows, which a poisoned database must reproduce.
"""

from __future__ import annotations

import csv
import json

import pytest

from benchmarks_db.record import RunRecord
from benchmarks_db.store import COLUMNS, BenchmarkStore, record_values
from benchmarks_db.transfer import export_runs, import_runs
from hardware_selector_cli.app import main
from tests.db_samples import sample_record


def _poison(store: BenchmarkStore, **fields) -> None:
    """Store a row as an older version (or a hand edit) might have: past today's validation."""
    values = dict(zip(COLUMNS, record_values(sample_record())))
    values.update(fields)
    with store.writing() as connection:
        connection.execute(
            f"INSERT INTO runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})",
            [values[column] for column in COLUMNS],
        )


@pytest.mark.parametrize(
    "field, value",
    [
        ("step_time_median_s", float("inf")),
        ("tokens_per_s", 1e308),
        ("mfu", float("nan")),
        ("step_time_median_s", 1e-320),
    ],
)
def test_records_refuse_non_finite_and_absurd_measurements(field, value):
    with pytest.raises(ValueError):
        RunRecord(**{**sample_record().model_dump(), field: value})


def test_a_poisoned_database_still_plans_and_says_what_it_ignored(tmp_path, capsys):
    clean, poisoned = BenchmarkStore(tmp_path / "clean.duckdb"), BenchmarkStore(tmp_path / "poisoned.duckdb")
    good = sample_record()
    clean.add(good)
    poisoned.add(good)
    _poison(poisoned, step_time_median_s=float("inf"))
    _poison(poisoned, step_time_median_s=1e308, predicted_step_time_s=1e-308)
    assert [record.id for record in poisoned.runs()] == [good.id] and poisoned.skipped_rows == 2
    argv = ["plan", "--model", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "128", "--json"]
    assert main([*argv, "--db", str(clean.path)]) == 0
    expected = json.loads(capsys.readouterr().out)["best"]
    assert main([*argv, "--db", str(poisoned.path)]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    # The same plan, calibrated by the same good record, as without the bad rows.
    assert best["config"] == expected["config"] and best["throughput"] == expected["throughput"]
    assert main([*argv[:-1], "--db", str(poisoned.path)]) == 0
    assert "2 stored record(s) ignored" in " ".join(capsys.readouterr().out.split())


def test_import_counts_non_finite_rows_as_bad_and_keeps_the_rest(tmp_path):
    source = BenchmarkStore(tmp_path / "source.duckdb")
    source.add_many([sample_record(), sample_record()])
    exported = tmp_path / "runs.csv"
    export_runs(source, exported)
    rows = list(csv.DictReader(exported.open()))
    rows[1]["step_time_median_s"] = "inf"
    with exported.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    target = BenchmarkStore(tmp_path / "target.duckdb")
    report = import_runs(target, exported)
    assert len(report.bad_rows) == 1 and "row" in report.bad_rows[0]
    assert len(target.runs()) == 1 and target.skipped_rows == 0


def test_a_database_that_cannot_be_locked_is_read_read_only(tmp_path, capsys):
    store = BenchmarkStore(tmp_path / "shared.duckdb")
    store.add(sample_record())
    (tmp_path / "shared.duckdb.lock").unlink()
    (tmp_path / "shared.duckdb.lock").mkdir()  # a lock file that cannot be created (as on a read-only share)
    assert main(["db", "list", "--db", str(store.path)]) == 0
    out, err = capsys.readouterr()
    assert "opened read-only" in err and err.count("\n") == 1
    with pytest.raises(ValueError, match="cannot write"):
        store.add(sample_record())


@pytest.mark.parametrize("content", ["a,b\n1,2\n", "not a database at all"])
def test_a_db_path_that_is_not_duckdb_is_one_line(tmp_path, capsys, content):
    path = tmp_path / "runs.csv"
    path.write_text(content)
    assert main(["db", "list", "--db", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "is not a DuckDB database" in err and "\n" not in err


def test_a_db_duckdb_cannot_read_is_said_in_our_words_not_duckdbs(tmp_path, capsys):
    """DuckDB's own text ("IO Error: Could not read enough bytes from file ...: attempted to read 3192 bytes from
    location 5000", "Catalog Error: Cannot launch in-memory database") once reached the user as it was."""
    good = BenchmarkStore(tmp_path / "good.duckdb")
    good.add(sample_record())
    (tmp_path / "cut.duckdb").write_bytes(good.path.read_bytes()[:5000])
    (tmp_path / "junk.duckdb").write_bytes(b"not a database at all")
    (tmp_path / "folder.duckdb").mkdir()
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 and nothing a parquet reader wants")
    for argv, message in (
        (["db", "list", "--db", tmp_path / "cut.duckdb"], "cut.duckdb is a damaged or cut-short DuckDB database"),
        (["db", "list", "--db", tmp_path / "junk.duckdb"], "junk.duckdb is not a DuckDB database; pass --db"),
        (["db", "list", "--db", tmp_path / "folder.duckdb"], "folder.duckdb is a folder; pass --db a .duckdb file"),
        (["db", "import", tmp_path / "bad.parquet", "--db", good.path], "bad.parquet: not a readable parquet file"),
    ):
        assert main([str(arg) for arg in argv]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err
        assert not any(internal in err for internal in ("IO Error", "Catalog Error", "Invalid Input", "location")), err


def test_every_db_path_mistake_is_one_line_and_leaves_no_lock_file(tmp_path, capsys, monkeypatch):
    """`db list --db ''` was a traceback (Path('.') has no name for a lock), '  ' and a link to nothing listed 0
    runs, /proc/self/status printed a read-only note before its error, and a SQLite file was "a damaged DuckDB
    database"; each left a .lock file beside it. Every --db is checked where the store is made
    (benchmarks_db/paths.check_db_path)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "other.db").write_bytes(b"SQLite format 3\0" + bytes(100))  # a SQLite database's header
    (tmp_path / "gone.duckdb").symlink_to(tmp_path / "missing" / "x.duckdb")
    for db, message in (
        ("", "--db . is a folder"),
        ("  ", "--db is empty"),  # the CLI's own check; run-training-benchmark's --db meets check_db_path's
        ("gone.duckdb", "gone.duckdb links to "),
        ("/proc/self/status", "--db /proc/self/status is not a DuckDB database"),
        ("other.db", "--db other.db is not a DuckDB database"),
    ):
        assert main(["db", "list", "--db", db]) == 2, db
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, (db, err)
    assert not list(tmp_path.glob("*.lock")) and not (tmp_path / "missing").exists()


def test_a_bad_database_from_the_environment_is_named_by_its_variable(tmp_path, capsys, monkeypatch):
    """Found by a new user's audit: with $HARDWARE_SELECTOR_DB naming a CSV (and no --db anywhere), `plan`,
    `db list` and `train` said "--db runs.csv is not a DuckDB database", sending the user to a flag they never
    gave. The line names the variable; a given --db is still named as the flag."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs.csv").write_text("id,gpu_name\n1,cpu\n")
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(tmp_path / "runs.csv"))
    for args in (["db", "list"], ["plan", "-m", "gpt2", "--gpu", "cpu"]):
        assert main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert f"$HARDWARE_SELECTOR_DB {tmp_path / 'runs.csv'} is not a DuckDB database" in err and "\n" not in err
    assert main(["db", "list", "--db", "runs.csv"]) == 2
    assert "--db runs.csv is not a DuckDB database" in capsys.readouterr().err
    # The same for a database a run could not write (a run's checks, backends/runner/output_paths.py).
    from backends.runner.output_paths import check_database
    from benchmarks_db.paths import db_origin
    from planner.errors import UserInputError

    blocked = tmp_path / "runs.csv" / "benchmarks.duckdb"  # under a file: no folder can be made there
    with pytest.raises(UserInputError, match=r"^\$HARDWARE_SELECTOR_DB .*runs\.csv is a file, not a folder"):
        check_database(blocked, db_origin(None))


def test_an_empty_database_file_says_it_is_empty_and_what_to_do(tmp_path, capsys):
    """Found by a new user's audit: a 0-byte benchmarks.duckdb (`touch`ed, or cut to nothing) was "not a DuckDB
    database; pass --db a .duckdb file", which it is by name; the line says it is empty and to delete it."""
    empty = tmp_path / "benchmarks.duckdb"
    empty.touch()
    for args in (["db", "list"], ["db", "calibration"], ["plan", "-m", "gpt2", "--gpu", "cpu"]):
        assert main([*args, "--db", str(empty)]) == 2, args
        err = capsys.readouterr().err.strip()
        assert f"--db {empty} is an empty file (0 bytes)" in err and "delete it" in err and "\n" not in err, err
    assert empty.read_bytes() == b"" and not list(tmp_path.glob("*.lock"))
