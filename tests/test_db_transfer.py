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


def _rewrite(path, rows):
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_rows_that_would_mislead_the_calibration_are_refused_by_name(filled, tmp_path):
    """A new user's audit imported, without a word: a row without an id (twice, each dated now and so the newest
    measurement), one dated 2099, counts past the table's 32-bit columns (a traceback that aborted the import),
    prediction_json that is no JSON (`db show` then crashed), and columns that contradict the config_json the
    calibration reads. Each is a bad row now, named by its column; a GPU spelled as its driver names it is stored
    by the catalog's name, which plans read records by; columns that state another split than config_json are what
    ran, and the record's config reads them."""
    exported = tmp_path / "runs.csv"
    export_runs(filled, exported)
    with exported.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    base = next(row for row in rows if row["status"] == "ok")
    edits = [
        {"id": ""},
        {"created_at": "2099-01-01 00:00:00"},
        {"gpu_count": "3000000000"},
        {"prediction_json": "not json"},
        {"gpu_name": "Quantum-9000"},
        {"gpu_name": "NVIDIA A100-SXM4-80GB"},
        {"micro_batch": "8", "grad_accum": "1", "global_batch": "16"},  # the door's own micro-batch: what ran
    ]
    edited = [{**base, **edit, "id": edit.get("id", f"row-{number}")} for number, edit in enumerate(edits)]
    _rewrite(exported, edited)
    target = BenchmarkStore(tmp_path / "target.duckdb")
    report = import_runs(target, exported)
    problems = [line.split(": ", 1)[1] for line in report.bad_rows]
    assert problems[0].startswith("id: empty")
    assert "created_at 2099-01-01 is in the future" in problems[1]
    assert problems[2].startswith("gpu_count: Input should be less than or equal to 2147483647")
    assert "prediction_json is not JSON" in problems[3]
    assert problems[4].startswith("gpu_name: 'Quantum-9000' is no GPU of the catalog")
    assert report.imported == 2 and len(problems) == 5
    by_id = {record.id: record for record in target.runs()}
    assert by_id["row-5"].gpu_name == "A100-80GB"
    # A row whose columns state another split than its config_json (the Trainer and Lightning doors stored their
    # framework's micro-batch beside the plan's config): the columns say what ran, and the calibration reads them.
    assert by_id["row-6"].config.micro_batch == 8 and by_id["row-6"].measured_run().config.micro_batch == 8


def test_the_check_for_held_ids_and_the_insert_are_one_write(tmp_path):
    """Two imports of one file at once: one crashed on the primary key (its check for held ids and its insert were
    two accesses, the other import's insert between them). add_new does both under the write lock."""
    store = BenchmarkStore(tmp_path / "runs.duckdb")
    records = [sample_record() for _ in range(3)]
    store.add(records[0])
    assert [record.id for record in store.add_new([*records, records[1]])] == [records[1].id, records[2].id]
    assert store.add_new(records) == [] and store.count() == 3
