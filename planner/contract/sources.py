"""How a number in plan.json says the benchmark records moved it (docs/benchmarks.md, "Calibration").

A step time the planner calibrated is sourced with one of these prefixes: a correction's, or a measured run's.
Predicted.throughput_source (run_config.py) starts with one of them when the plan was calibrated, and the
planner's calibration writes them. Kept apart from run_config.py so a plain `plan`, which calibrates but writes
no run folder, does not build the run contract's models (docs/performance.md, "The planner").
"""

CORRECTED_SOURCES = ("calibration: ", "measured: ")


def prediction_source(throughput_source: str) -> str:
    """Where a run's predicted step time came from, short enough for a summary line beside the number: a measured
    record or a calibration verbatim (which records), the formula by name (its definition is plan.json's
    throughput_source; an older plan.json without one predicted with the formula too)."""
    if throughput_source.startswith(CORRECTED_SOURCES):
        return throughput_source
    return "formula"
