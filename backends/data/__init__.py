"""A run's data: local text tokenized into cached blocks (prepare.py), or synthetic tokens, and the
deterministic, resumable micro-batch stream over them (stream.py). docs/running.md describes the formats."""

from backends.data.blocks import Blocks
from backends.data.prepare import RunData, prepare_data
from backends.data.stream import micro_batches
from backends.data.synthetic import SyntheticTokens

__all__ = ["Blocks", "RunData", "SyntheticTokens", "micro_batches", "prepare_data"]
