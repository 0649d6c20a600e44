"""A run's data: local text tokenized into cached blocks (prepare.py), or synthetic tokens, and the
deterministic, resumable micro-batch stream over them (stream.py). docs/running.md describes the formats."""

from .blocks import Blocks
from .prepare import RunData, prepare_data
from .stream import micro_batches
from .synthetic import SyntheticTokens

__all__ = ["Blocks", "RunData", "SyntheticTokens", "micro_batches", "prepare_data"]
