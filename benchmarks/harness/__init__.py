"""The benchmark harness: what to measure and how, recorded into benchmarks_db.

matrix.py (the configs to measure), targets.py (which GPU they are planned
for), jobs.py (the typed job and result), launch.py (the configs of one world
size as trials of one torchrun launch of the one runner), trials.py (those
launches, also a tune's), processes.py (timeouts and process groups) and
runner.py (the loop that records every outcome). See docs/benchmarks.md.
"""
