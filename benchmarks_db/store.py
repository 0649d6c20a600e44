"""The DuckDB store of benchmark runs: safe writes, simple queries.

DuckDB lets one process write a file at a time, so every access holds an
advisory lock on `<db>.lock` (exclusive to write, shared to read) and keeps
the database open only for that access. A second writer waits for the lock
(with backoff, up to `lock_timeout_s`); each run is inserted in its own
transaction, so a process killed mid-write leaves no partial row.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from planner.errors import UserInputError

from .gpu_index import file_state, forget_index, is_current, may_hold_gpu, stored_gpus, write_index
from .paths import check_db_path, db_origin, resolve_db_path
from .record import RunRecord, RunStatus
from .schema import SCHEMA_VERSION, applied_version, check_ours, migrate

COLUMNS: tuple[str, ...] = tuple(RunRecord.model_fields)
# DuckDB's words for a database file it cannot read whole (cut short, overwritten in the middle).
DAMAGE_WORDS = ("could not read enough bytes", "checksum", "corrupt", "invalid database", "serializ")
_INSERT = f"INSERT INTO runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})"


def record_values(record: RunRecord) -> list[Any]:
    data = record.model_dump()
    data["status"] = record.status.value
    return [data[column] for column in COLUMNS]


def record_from_row(row: tuple) -> RunRecord:
    return RunRecord.model_validate(dict(zip(COLUMNS, row)))


class BenchmarkStore:
    def __init__(self, path: str | Path | None = None, *, lock_timeout_s: float = 120.0, flag_name: str = "--db"):
        """`flag_name`: how the asking door spells the database's path (the Python API's db=), for its errors."""
        self.flag_name = flag_name
        self.path = check_db_path(resolve_db_path(path), db_origin(path, flag_name), flag_name)
        self.lock_timeout_s = lock_timeout_s
        self.skipped_rows = 0  # rows the last runs() left out because they fail validation (non-finite, absurd)
        self._said_read_only = False

    # -- locking and connections -------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            if exclusive:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(lock_path, "a+")  # noqa: SIM115 (closed below, after the lock is released)
        except OSError as error:
            if exclusive:
                raise UserInputError(
                    f"cannot write {self.path}: {error.strerror or error} ({lock_path}); pass {self.flag_name} a writable path"
                ) from None
            self._say_read_only(lock_path, error)
            yield  # a read-only share: read without our lock (DuckDB opens the file read-only)
            return
        with handle:
            mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
            deadline = time.monotonic() + self.lock_timeout_s
            delay = 0.01
            while True:
                try:
                    fcntl.flock(handle.fileno(), mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise UserInputError(
                            f"{self.path} is busy (another benchmark holds it for over {self.lock_timeout_s:g} s); "
                            "retry when it finishes"
                        ) from None
                    time.sleep(delay * (1 + random.random()))
                    delay = min(delay * 2, 0.5)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _say_read_only(self, lock_path: Path, error: OSError) -> None:
        if not self._said_read_only:
            import sys

            print(
                f"note: {self.path} opened read-only (cannot create {lock_path.name}: {error.strerror or error})",
                file=sys.stderr,
            )
            self._said_read_only = True

    def _connect(self, read_only: bool) -> Any:
        import duckdb

        # Our lock serialises our own processes; a foreign one (the duckdb CLI) may
        # still hold the file, so retry DuckDB's own lock error for a while too.
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.05
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=read_only)
            except duckdb.IOException as error:
                if "lock" not in str(error).lower() or time.monotonic() > deadline:
                    raise UserInputError(self._why_not_opened(str(error))) from None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
            except duckdb.Error:  # a CSV, a text file, anything that is not a DuckDB database
                raise UserInputError(
                    f"{self.path} is not a DuckDB database; pass {self.flag_name} a .duckdb file"
                ) from None

    def _why_not_opened(self, duckdb_text: str) -> str:
        """DuckDB's reason, in our words: its own text names its internals ("IO Error: Could not read enough
        bytes ... from location 5000"), which say nothing about what to do."""
        text = duckdb_text.lower()
        if "lock" in text:
            return f"{self.path} is held open by another program; close it (or wait for it) and retry"
        if "not a valid duckdb database" in text:
            return f"{self.path} is not a DuckDB database; pass {self.flag_name} a .duckdb file"
        if "permission denied" in text:
            return f"cannot read {self.path}: permission denied; pass {self.flag_name} a file you can read and write"
        return (
            f"{self.path} is a damaged or cut-short DuckDB database (it cannot be read whole); restore it from a "
            f"copy, or pass {self.flag_name} a new path"
        )

    @contextlib.contextmanager
    def writing(self) -> Iterator[Any]:
        """A read-write connection; the GPU index beside the file (gpu_index.py) is removed first and written
        anew once the writes are in the file (a block that fails leaves none: the next read writes it)."""
        with self._locked(exclusive=True):
            forget_index(self.path)
            connection = self._connect(read_only=False)
            try:
                with self._read_whole():
                    self._version(connection)  # a newer file is refused for writes too, not only for reads
                    migrate(connection)
                    yield connection
                    gpus = stored_gpus(connection)
            finally:
                connection.close()
            write_index(self.path, gpus, file_state(self.path))

    @contextlib.contextmanager
    def _read_whole(self) -> Iterator[None]:
        """DuckDB's errors of a file it opened but cannot read (cut short past its header: "Could not read enough
        bytes") in our one line, wherever a query meets them; they were tracebacks in every command, and failed a
        finished `train` at its record (a new user's audit)."""
        import duckdb

        try:
            yield
        except (duckdb.IOException, duckdb.InternalException, duckdb.SerializationException) as error:
            text = str(error).lower()
            if "no space left" in text:
                raise UserInputError(
                    f"cannot write {self.path}: no space left on its device; free some, or pass {self.flag_name} "
                    "a path on another disk"
                ) from None
            # Only the database file's own damage is said so; another file's error (an export's COPY target)
            # is its caller's to name (a review).
            if str(self.path).lower() in text or any(word in text for word in DAMAGE_WORDS):
                raise UserInputError(self._why_not_opened(str(error))) from None
            raise

    @contextlib.contextmanager
    def reading(self) -> Iterator[Any | None]:
        """A read-only connection, or None when there is no database yet."""
        if not self.path.exists():
            yield None
            return
        # One connection checks the version and serves the read (opening a DuckDB file costs ~30 ms of CPU); only
        # an older file is closed, upgraded in place, and opened again.
        for attempt in range(2):
            with self._locked(exclusive=False):
                connection = self._connect(read_only=True)
                try:
                    with self._read_whole():
                        current = self._version(connection) == SCHEMA_VERSION
                        if current or attempt:
                            state = file_state(self.path)  # the file as this read sees it
                            yield connection
                            # The index is missing or stale (a first read, a write by another program): anew.
                            gpus = stored_gpus(connection) if current and not is_current(self.path) else None
                finally:
                    connection.close()
                if current or attempt:
                    if gpus is not None:
                        write_index(self.path, gpus, state)
                    return
            with self.writing():  # an older file: upgrade it in place first
                pass

    def _version(self, connection: Any) -> int:
        check_ours(connection, self.path, self.flag_name)
        version = applied_version(connection)
        if version > SCHEMA_VERSION:
            raise UserInputError(
                f"{self.path} has schema version {version}, newer than this hardware-selector's "
                f"({SCHEMA_VERSION}); upgrade hardware-selector"
            )
        return version

    # -- writes -------------------------------------------------------------------

    def add(self, record: RunRecord) -> None:
        """Insert one run in its own transaction."""
        self.add_many([record])

    def add_many(self, records: list[RunRecord]) -> None:
        """Insert runs in ONE transaction: all of them or none."""
        if not records:
            return
        with self.writing() as connection:
            self._insert(connection, records)

    def add_new(self, records: list[RunRecord]) -> list[RunRecord]:
        """Insert the runs whose id the database does not hold yet (the first of each id), in one transaction
        under the write lock: two imports of one file at once add it once (their check and insert were two
        accesses, and the second insert broke on the primary key). Returns those inserted."""
        firsts: dict[str, RunRecord] = {}
        for record in records:
            firsts.setdefault(record.id, record)
        unique = list(firsts.values())
        if not unique:
            return []
        with self.writing() as connection:
            ids = [record.id for record in unique]
            held = {
                row[0] for row in connection.execute("SELECT id FROM runs WHERE list_contains(?, id)", [ids]).fetchall()
            }
            fresh = [record for record in unique if record.id not in held]
            self._insert(connection, fresh)
        return fresh

    @staticmethod
    def _insert(connection: Any, records: list[RunRecord]) -> None:
        if not records:
            return
        connection.execute("BEGIN TRANSACTION")
        try:
            connection.executemany(_INSERT, [record_values(record) for record in records])
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise

    # -- reads --------------------------------------------------------------------

    def runs(
        self,
        *,
        gpu: str | None = None,
        model: str | None = None,
        strategy: str | None = None,
        status: str | None = None,
        limit: int | None = None,
    ) -> list[RunRecord]:
        """Runs matching every filter given, newest first."""
        if gpu is not None and not may_hold_gpu(self.path, gpu):  # without DuckDB (gpu_index.py)
            self.skipped_rows = 0
            return []
        clauses, values = [], []
        for column, value in (("gpu_name", gpu), ("model_name", model), ("strategy", strategy), ("status", status)):
            if value is not None:
                clauses.append(f"lower({column}) = lower(?)")
                values.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        tail = f"LIMIT {int(limit)}" if limit else ""
        with self.reading() as connection:
            if connection is None:
                return []
            rows = connection.execute(
                f"SELECT {', '.join(COLUMNS)} FROM runs {where} ORDER BY created_at DESC, id {tail}", values
            ).fetchall()
        records = []
        for row in rows:
            try:
                records.append(record_from_row(row))
            except ValueError:  # a row an older version (or an edited file) stored out of range
                continue
        self.skipped_rows = len(rows) - len(records)
        return records

    def get(self, id_prefix: str) -> RunRecord:
        """The run whose id starts with this prefix; a UserInputError if none or several do."""
        if not id_prefix:
            raise UserInputError("give a run id (or its first characters); list them with `hardware-selector db list`")
        with self.reading() as connection:
            rows = (
                []
                if connection is None
                else connection.execute(
                    f"SELECT {', '.join(COLUMNS)} FROM runs WHERE id LIKE ? || '%' LIMIT 2", [id_prefix]
                ).fetchall()
            )
        if not rows:
            raise UserInputError(f"no run with id '{id_prefix}' in {self.path}; see `hardware-selector db list`")
        if len(rows) > 1:
            raise UserInputError(f"run id '{id_prefix}' is ambiguous; give more characters")
        return record_from_row(rows[0])

    def done_matrix_keys(self, *, retry_failed: bool = False) -> set[str]:
        """Matrix entries already recorded (only the successful ones when retrying failures)."""
        wanted = [RunStatus.OK.value] if retry_failed else [status.value for status in RunStatus]
        with self.reading() as connection:
            if connection is None:
                return set()
            rows = connection.execute(
                "SELECT DISTINCT matrix_key FROM runs WHERE matrix_key IS NOT NULL AND list_contains(?, status)",
                [wanted],
            ).fetchall()
        return {row[0] for row in rows}

    def count(self) -> int:
        with self.reading() as connection:
            return 0 if connection is None else connection.execute("SELECT count(*) FROM runs").fetchone()[0]


def config_summary(record: RunRecord) -> str:
    config = json.loads(record.config_json)
    checkpointing = config.get("activation_checkpointing", "none")
    return f"{record.strategy_label} mb={record.micro_batch} ga={record.grad_accum} ac={checkpointing}"
