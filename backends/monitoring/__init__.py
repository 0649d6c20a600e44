"""What a run measures: `step_monitor.py` (per-step times, tokens/s, memory, JSONL), `training_monitor.py`
(TrainingMonitor: metrics, callbacks, system stats) and `profiling.py` (named sections, a torch profiler trace).
Import the modules directly.
"""
