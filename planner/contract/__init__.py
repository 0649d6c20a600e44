"""The typed contract between the planner and everything that runs a plan (docs/architecture.md).

Pure pydantic, no torch: `backends/` reads a run folder only through these models, and the emitters write
the folder only from them. layout.py (ParallelDims, the one layout value), run_config.py (plan.json's run
block), engine_config.py (engine.json), plan_file.py (reading plan.json back), schema.py (the one schema
version), sources.py (how a calibrated step time is sourced). Import the modules directly: this package
imports nothing, so the layout can be used by the training config it is part of.
"""
