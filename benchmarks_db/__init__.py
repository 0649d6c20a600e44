"""The benchmark database: measured training runs in DuckDB, and what is read back out of them.

record.py (one run), environment.py (the software and machine a record was
measured on), schema.py (migrations), store.py (locked writes, queries),
gpu_index.py (the GPUs a database holds, beside it), transfer.py
(Parquet/CSV), calibrate.py (records -> planner corrections), record_errors.py
(each record predicted, calibrated, measured), plot.py. Storage never trains and imports neither `backends` nor torch: what
fills it is the harness in benchmarks/harness/ and the runner's summary
(docs/architecture.md, docs/benchmarks.md).
"""
