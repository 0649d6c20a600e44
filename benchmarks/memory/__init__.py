"""Memory: op-level traces of real training steps and what the memory estimator is compared with.

memory_trace.py traces one step under FakeTensorMode and MemTracker (its helpers: trace_inputs.py,
trace_recorder.py, trace_sharding.py, selective_checkpoint.py), trace_configs.py and
trace_family_models.py hold the traced steps, run_memory_traces.py records them into
benchmarks/results/memory_traces.json and compare_memory.py holds the estimator to them;
memory_per_layer.py (models: per_layer_models.py, per_layer_moe_models.py) does the same per block.
See docs/accuracy.md ("Memory") and docs/benchmarks.md.
"""
