"""Accuracy: the planner's estimates against measurements.

calibrate_throughput.py fits the throughput constants on llm-foundry's runs and checks held-out ones,
validate_published_runs.py and per_stack_accuracy.py compare with published large-scale runs,
serving_cpu.py checks the decode roofline on this CPU, and measure_cpu.py measures this machine as the
catalog's `cpu` pseudo-GPU. See docs/accuracy.md and docs/benchmarks.md.
"""
