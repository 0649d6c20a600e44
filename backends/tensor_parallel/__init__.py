"""Megatron-style tensor parallelism for unmodified HF decoders (see apply.py)."""

from backends.tensor_parallel.apply import apply_tensor_parallel, shard_specs
from backends.tensor_parallel.cross_entropy import vocab_parallel_causal_lm_loss
from backends.tensor_parallel.layers import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    shard_tensor,
    unshard_tensor,
)

__all__ = [
    "apply_tensor_parallel",
    "shard_specs",
    "vocab_parallel_causal_lm_loss",
    "ColumnParallelLinear",
    "RowParallelLinear",
    "VocabParallelEmbedding",
    "shard_tensor",
    "unshard_tensor",
]
