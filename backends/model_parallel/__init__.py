"""Tensor and pipeline parallelism composed on an HF causal LM: `split.py` splits it, `parallel_model.py` runs
the part a rank keeps. backends/parallelize.py is the one entry (docs/parallelism.md). Import the modules
directly.
"""
