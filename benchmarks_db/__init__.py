"""The benchmark database: measured training runs in DuckDB, and the tools that fill and share it.

record.py (one run), schema.py (migrations), store.py (locked writes, queries),
transfer.py (Parquet/CSV), matrix.py (what to measure), runner.py with
backends_launch.py / measure.py (how), calibrate.py (records -> planner
corrections), plot.py. See docs/benchmarks.md.
"""
