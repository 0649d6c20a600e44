"""Export to and import from Parquet/CSV: round trips, bad rows, rejected files, duplicates."""

from __future__ import annotations

import csv

import pytest

from benchmarks_db.store import BenchmarkStore
from benchmarks_db.transfer import export_runs, import_runs
from planner.errors import UserInputError
from tests.db_samples import sample_record


@pytest.fixture
def filled(tmp_path):
    store = BenchmarkStore(tmp_path / "source.duckdb")
    store.add_many([sample_record(micro_batch=n, tokens_per_s=1000.0 * n) for n in (1, 2, 3)])
    store.add(sample_record(status="timeout", step_time_median_s=None, error="killed after 600 s"))
    return store


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_export_then_import_reproduces_every_run(filled, tmp_path, suffix):
    exported = tmp_path / f"runs{suffix}"
    assert export_runs(filled, exported) == 4
    target = BenchmarkStore(tmp_path / f"target{suffix}.duckdb")
    report = import_runs(target, exported)
    assert (report.rows, report.imported, report.duplicates, report.bad_rows) == (4, 4, 0, [])
    by_id = {record.id: record for record in target.runs()}
    assert by_id == {record.id: record for record in filled.runs()}
    again = import_runs(target, exported)  # importing twice changes nothing
    assert (again.imported, again.duplicates) == (0, 4) and target.count() == 4


def test_a_record_as_this_version_writes_it_survives_a_csv_round_trip(tmp_path):
    """Records keep `host` empty (benchmarks_db/environment.py), and a CSV's "" cell reads back as NULL: every
    row this version recorded was skipped on import as "host: Field required"."""
    source = BenchmarkStore(tmp_path / "source.duckdb")
    source.add(sample_record(host=""))
    assert export_runs(source, tmp_path / "runs.csv") == 1
    report = import_runs(BenchmarkStore(tmp_path / "target.duckdb"), tmp_path / "runs.csv")
    assert (report.imported, report.bad_rows) == (1, [])


def test_bad_rows_are_reported_and_the_rest_imported(filled, tmp_path):
    exported = tmp_path / "runs.csv"
    export_runs(filled, exported)
    with exported.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    rows[1]["status"] = "exploded"  # not a status
    rows[2]["step_time_median_s"] = "-3"  # not a time
    with exported.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    target = BenchmarkStore(tmp_path / "target.duckdb")
    report = import_runs(target, exported)
    assert report.imported == 2 and len(report.bad_rows) == 2
    assert report.bad_rows[0].startswith("row 2: status") and report.bad_rows[1].startswith("row 3: step_time_median_s")
    assert {r.id for r in target.runs()} == {rows[0]["id"], rows[3]["id"]}


def test_file_without_required_columns_is_rejected_whole(tmp_path):
    foreign = tmp_path / "foreign.csv"
    foreign.write_text("model,tokens_per_s\ngpt2,1000\n")
    target = BenchmarkStore(tmp_path / "target.duckdb")
    with pytest.raises(UserInputError, match="rejected, it lacks the column.*host"):
        import_runs(target, foreign)
    assert target.count() == 0
    spreadsheet = tmp_path / "runs.xlsx"
    spreadsheet.write_text("")
    with pytest.raises(UserInputError, match="unknown file type '.xlsx'"):
        import_runs(target, spreadsheet)
