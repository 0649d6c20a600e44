"""How a number in plan.json says the benchmark records moved it (docs/benchmarks.md, "Calibration").

A step time the planner calibrated is sourced with one of these prefixes: a correction's, or a measured run's.
Predicted.throughput_source (run_config.py) starts with one of them when the plan was calibrated, and the
planner's calibration writes them. Kept apart from run_config.py so a plain `plan`, which calibrates but writes
no run folder, does not build the run contract's models (docs/performance.md, "The planner").
"""

CORRECTED_SOURCES = ("calibration: ", "measured: ")
