"""A candidate's TrainingConfig from its group's validated base: only the micro-batch and accumulation differ.

The search builds one config per (layout, precision, AC) with full pydantic
validation, then thousands that differ from it in two positive integers it
generated itself. pydantic's model_copy(update=...) does exactly what
`with_batch` does (copy __dict__, set the two fields, add them to the fields
set, no validation) but through __copy__, copy.copy and generic update code,
which cost more than the memory estimate they feed.
"""

from __future__ import annotations

from typing import Any

from planner.training_config import TrainingConfig

_BATCH_FIELDS = frozenset({"micro_batch", "grad_accum"})


def with_batch(base: TrainingConfig, micro_batch: int, grad_accum: int) -> TrainingConfig:
    """base.model_copy(update={"micro_batch": ..., "grad_accum": ...}), without the generic machinery."""
    copy: Any = object.__new__(TrainingConfig)
    object.__setattr__(copy, "__dict__", {**base.__dict__, "micro_batch": micro_batch, "grad_accum": grad_accum})
    object.__setattr__(copy, "__pydantic_fields_set__", base.__pydantic_fields_set__ | _BATCH_FIELDS)
    # TrainingConfig ignores extra fields and has no private attributes: both are None on every instance.
    object.__setattr__(copy, "__pydantic_extra__", None)
    object.__setattr__(copy, "__pydantic_private__", None)
    return copy
