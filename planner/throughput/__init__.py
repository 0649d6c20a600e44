"""Throughput estimator: step time, tokens/s, MFU/HFU, time and cost to train."""
