"""Share runs between teams: export to and import from Parquet or CSV.

Import policy: a file missing a required column, or one its rows need for their
status, is rejected as a whole (with the columns it lacks); otherwise each row is validated on its own, bad rows
are reported by row number and reason, and the good ones are imported in one
transaction. Runs whose id is already in the database are skipped, so
importing the same file twice changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ValidationError

from planner.errors import UserInputError
from planner.files import atomic_path
from planner.progress import WorkProgress

from .record import RunRecord, RunStatus, needed_by
from .store import COLUMNS, BenchmarkStore

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}
# id and created_at have defaults for a new run, but an imported row keeps its own: without an id the same file
# imported twice was added twice, and each row undated took "now" and stood as the newest measurement (an audit).
REQUIRED_COLUMNS = (
    ("id", "created_at")
    + tuple(name for name, field in RunRecord.model_fields.items() if field.is_required() and name != "status")
    + ("status",)
)


class ImportReport(BaseModel):
    path: str
    rows: int
    imported: int
    duplicates: int
    bad_rows: list[str]  # "row 7: step_time_median_s: ..." lines
    ignored_columns: list[str]


def file_format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UserInputError(f"{path}: unknown file type '{path.suffix}'; use .parquet or .csv")
    return fmt


def export_runs(store: BenchmarkStore, path: str | Path, *, force: bool = False) -> int:
    """Write every run to a Parquet or CSV file (atomically); returns how many. An existing file is replaced
    only with force: it may be another export, or a file that is not ours at all."""
    target = Path(path)
    if target.is_dir():  # before the file type: a folder (or '.', an empty path) has none
        raise UserInputError(f"{target} is a folder; give the export a file name ending in .parquet or .csv")
    fmt = file_format(target)
    if target.exists() and not force:
        raise UserInputError(f"{target} exists; pass --force to replace it, or choose another file name")
    # CSV has no list type: the per-rank peaks travel as a JSON array.
    columns = [
        f"to_json({column}) AS {column}" if fmt == "csv" and column == "peak_memory_per_rank_bytes" else column
        for column in COLUMNS
    ]
    import duckdb

    with atomic_path(target) as temporary, store.reading() as connection:
        if connection is None:
            raise UserInputError(f"no benchmark database at {store.path}; run run-training-benchmark --run first")
        count = connection.execute("SELECT count(*) FROM runs").fetchone()[0]
        options = "FORMAT parquet" if fmt == "parquet" else "FORMAT csv, HEADER true"
        query = f"SELECT {', '.join(columns)} FROM runs ORDER BY created_at, id"
        try:
            connection.execute(f"COPY ({query}) TO '{_sql_path(temporary)}' ({options})")
        except duckdb.IOException as error:  # the export file's own trouble, not the database's
            reason = "no space left on its device" if "no space left" in str(error).lower() else "it cannot be written"
            raise UserInputError(f"cannot export to {target}: {reason}; choose another file or folder") from None
    return count


def _sql_path(path: str | Path) -> str:
    return str(path).replace("'", "''")


def _read_rows(path: Path) -> tuple[list[str], list[tuple]]:
    import duckdb

    reader = "read_parquet(?)" if file_format(path) == "parquet" else "read_csv(?, header = true, all_varchar = true)"
    connection = duckdb.connect()
    try:
        relation = connection.execute(f"SELECT * FROM {reader}", [str(path)])
        names = [column[0] for column in relation.description]
        return names, relation.fetchall()
    except duckdb.Error:  # its text names DuckDB's internals ("Invalid Input Error: No magic bytes ..."), not ours
        raise UserInputError(
            f"{path}: not a readable {file_format(path)} file (damaged, cut short or of another format); "
            "write it again with `hardware-selector db export`"
        ) from None
    finally:
        connection.close()


def _row_record(values: dict) -> RunRecord:
    for column in ("id", "created_at"):
        if values.get(column) in (None, ""):
            raise ValueError(f"{column}: empty (an exported row has one; `hardware-selector db export` writes it)")
    if values.get("host") is None:  # empty in every record (environment.py); a CSV's "" reads back as NULL
        values["host"] = ""
    peaks = values.get("peak_memory_per_rank_bytes")
    if isinstance(peaks, str):
        try:
            values["peak_memory_per_rank_bytes"] = json.loads(peaks) if peaks.strip() else None
        except ValueError:
            raise ValueError("peak_memory_per_rank_bytes: not a JSON list of byte counts") from None
    record = RunRecord.model_validate(values)
    # A GPU spelled as its driver names it ("NVIDIA A100-SXM4-80GB") is stored by the catalog's name, which every
    # plan reads records by; one the catalog lacks would be stored and never read.
    from planner.hardware.gpus import find_gpu

    gpu = find_gpu(record.gpu_name)
    if gpu is None:
        raise ValueError(f"gpu_name: '{record.gpu_name}' is no GPU of the catalog (`hardware-selector gpus`); no plan "
                         "would read it")  # fmt: skip
    record.check_importable()
    return record if gpu.name == record.gpu_name else record.model_copy(update={"gpu_name": gpu.name})


def import_runs(store: BenchmarkStore, path: str | Path) -> ImportReport:
    source = Path(path)
    if source.is_dir():  # an empty path too: it is '.' once a Path
        raise UserInputError(f"{source} is a folder; import a .parquet or .csv file written by `db export`")
    if not source.is_file():
        raise UserInputError(f"{source}: no such file; import a .parquet or .csv file written by `db export`")
    names, rows = _read_rows(source)
    missing = [column for column in REQUIRED_COLUMNS if column not in names]
    if missing:
        raise UserInputError(
            f"{source}: rejected, it lacks the column(s) {', '.join(missing)}; "
            "export files with `hardware-selector db export`"
        )
    _require_status_columns(source, names, rows)
    known = [name for name in names if name in COLUMNS]
    records: list[RunRecord] = []
    bad: list[str] = []
    with WorkProgress(f"importing {source.name}", total=len(rows)) as progress:
        for number, row in enumerate(rows, start=1):
            values = {name: value for name, value in zip(names, row) if name in COLUMNS and value is not None}
            try:
                records.append(_row_record(values))
            except (ValidationError, ValueError) as error:
                bad.append(f"row {number}: {_first_problem(error)}")
            progress.advance()
    fresh = store.add_new(records)  # the check for ids already held and the insert: one write
    return ImportReport(
        path=str(source),
        rows=len(rows),
        imported=len(fresh),
        duplicates=len(records) - len(fresh),
        bad_rows=bad,
        ignored_columns=[name for name in names if name not in known],
    )


def _require_status_columns(source: Path, names: list[str], rows: list[tuple]) -> None:
    """A column the file's rows need for their status (an ok run's step time, a failed run's error) and the file
    lacks rejects the file as a whole, as a missing required column does: every such row would be bad."""
    statuses = {row[names.index("status")] for row in rows}
    needs: dict[str, set[str]] = {}
    for status in sorted(str(value) for value in statuses):
        if status in RunStatus._value2member_map_:  # an unknown status is that row's own problem
            needs.setdefault(needed_by(RunStatus(status)), set()).add(status)
    missing = {column: kinds for column, kinds in needs.items() if column not in names}
    if missing:
        column, kinds = sorted(missing.items())[0]
        raise UserInputError(
            f"{source}: rejected, it lacks the column {column}, which its rows of status "
            f"{', '.join(repr(kind) for kind in sorted(kinds))} need; export files with `hardware-selector db export`"
        )


def _first_problem(error: Exception) -> str:
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        return f"{where}: {first['msg']}" if where else first["msg"]
    return str(error).splitlines()[0]
