"""The database schema as an ordered list of migrations.

A database records the versions it has applied in `schema_migrations`; opening
it applies the missing ones, each in its own transaction, so an old file is
upgraded in place and a new one is built from nothing. Never edit a released
migration: append a new one.
"""

from __future__ import annotations

from typing import Any

MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (
        1,
        "runs table",
        [
            """
            CREATE TABLE runs (
                id VARCHAR PRIMARY KEY,
                created_at TIMESTAMP NOT NULL,
                host VARCHAR NOT NULL,
                gpu_name VARCHAR NOT NULL,
                gpu_count INTEGER NOT NULL,
                nodes INTEGER NOT NULL,
                interconnect VARCHAR,
                driver VARCHAR,
                torch_version VARCHAR,
                deepspeed_version VARCHAR,
                transformers_version VARCHAR,
                hardware_selector_version VARCHAR,
                model_name VARCHAR NOT NULL,
                model_spec_hash VARCHAR NOT NULL,
                tiny BOOLEAN NOT NULL,
                strategy VARCHAR NOT NULL,
                config_json VARCHAR NOT NULL,
                micro_batch INTEGER NOT NULL,
                grad_accum INTEGER NOT NULL,
                global_batch INTEGER NOT NULL,
                seq_len INTEGER NOT NULL,
                precision VARCHAR NOT NULL,
                step_time_median_s DOUBLE,
                step_time_spread_s DOUBLE,
                steps_measured INTEGER,
                tokens_per_s DOUBLE,
                tflops_per_gpu DOUBLE,
                mfu DOUBLE,
                peak_memory_per_rank_bytes BIGINT[],
                predicted_step_time_s DOUBLE,
                predicted_tokens_per_s DOUBLE,
                predicted_peak_memory_bytes BIGINT,
                prediction_json VARCHAR,
                status VARCHAR NOT NULL CHECK (status IN ('ok', 'oom', 'error', 'timeout')),
                error VARCHAR
            )
            """,
        ],
    ),
    (
        2,
        "matrix key and runner, for resuming a benchmark matrix",
        [
            "ALTER TABLE runs ADD COLUMN matrix_key VARCHAR",
            "ALTER TABLE runs ADD COLUMN runner VARCHAR",
            "CREATE INDEX runs_matrix_key ON runs (matrix_key)",
        ],
    ),
]

SCHEMA_VERSION = MIGRATIONS[-1][0]


def applied_version(connection: Any) -> int:
    exists = connection.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'schema_migrations'"  # cheaper than information_schema
    ).fetchone()[0]
    if not exists:
        return 0
    return connection.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0]


def check_ours(connection: Any, path: object, flag_name: str = "--db") -> None:
    """A database with tables but not our schema_migrations belongs to another program: never written into."""
    tables = {row[0] for row in connection.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if tables and "schema_migrations" not in tables:
        from planner.errors import UserInputError

        raise UserInputError(
            f"{path} is another program's DuckDB database (tables: {', '.join(sorted(tables)[:5])}); pass {flag_name} "
            "a benchmark database of ours, or a new path"
        )


def migrate(connection: Any, target: int = SCHEMA_VERSION) -> int:
    """Apply the migrations above the database's version up to `target`; returns the new version."""
    connection.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(version INTEGER PRIMARY KEY, description VARCHAR, applied_at TIMESTAMP DEFAULT current_timestamp)"
    )
    current = applied_version(connection)
    for version, description, statements in MIGRATIONS:
        if current < version <= target:
            connection.execute("BEGIN TRANSACTION")
            try:
                for statement in statements:
                    connection.execute(statement)
                connection.execute(
                    "INSERT INTO schema_migrations (version, description) VALUES (?, ?)", [version, description]
                )
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            current = version
    return current
