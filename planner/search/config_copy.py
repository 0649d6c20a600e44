"""A candidate's TrainingConfig from its group's validated base: only the micro-batch, the accumulation and
the activation checkpointing differ.

The search builds one config per (layout, precision) with full pydantic
validation, then thousands that differ from it in two positive integers it
generated itself and in a checkpointing level no check reads. pydantic's
model_copy(update=...) does exactly what these copies do (copy __dict__, set
the fields, add them to the fields set, no validation) but through __copy__,
copy.copy and generic update code, which cost more than the memory estimate
they feed.
"""

from __future__ import annotations

from typing import Any

from planner.training_config import ActivationCheckpointing, TrainingConfig

_BATCH_FIELDS = frozenset({"micro_batch", "grad_accum"})
_CHECKPOINTING_FIELDS = frozenset({"activation_checkpointing"})


def _copy(base: TrainingConfig, updates: dict[str, Any], updated: frozenset[str]) -> TrainingConfig:
    """base.model_copy(update=updates), without the generic machinery; `updated` names the updates' keys."""
    copy: Any = object.__new__(TrainingConfig)
    object.__setattr__(copy, "__dict__", {**base.__dict__, **updates})
    object.__setattr__(copy, "__pydantic_fields_set__", base.__pydantic_fields_set__ | updated)
    # TrainingConfig forbids extra fields and has no private attributes: both are None on every instance.
    object.__setattr__(copy, "__pydantic_extra__", None)
    object.__setattr__(copy, "__pydantic_private__", None)
    return copy


def with_batch(base: TrainingConfig, micro_batch: int, grad_accum: int) -> TrainingConfig:
    """base.model_copy(update={"micro_batch": ..., "grad_accum": ...}), without the generic machinery."""
    return _copy(base, {"micro_batch": micro_batch, "grad_accum": grad_accum}, _BATCH_FIELDS)


def with_checkpointing(base: TrainingConfig, checkpointing: ActivationCheckpointing) -> TrainingConfig:
    """base at another activation checkpointing level. TrainingConfig's checks never read the level (any
    level is valid wherever another is), so the copy needs no validation. One copy per base and level: the
    estimators' caches remember a config's key by its identity (planner/config_key.py)."""
    entry = _AT_LEVEL.get((id(base), checkpointing))
    if entry is not None and entry[0] is base:
        return entry[1]
    if len(_AT_LEVEL) >= _MAX_CONFIGS:
        _AT_LEVEL.clear()
    copy = _copy(base, {"activation_checkpointing": checkpointing}, _CHECKPOINTING_FIELDS)
    _AT_LEVEL[id(base), checkpointing] = (base, copy)  # holding the base keeps its id from being reused
    return copy


def validated(fields: dict[str, Any]) -> TrainingConfig:
    """TrainingConfig(**fields), validated once per distinct fields: a config is frozen, so one object serves
    every search that builds it (each cluster slice offers many of the same layouts)."""
    key = tuple(fields.items())
    config = _VALIDATED.get(key)
    if config is None:
        if len(_VALIDATED) >= _MAX_CONFIGS:
            _VALIDATED.clear()
        config = _VALIDATED[key] = TrainingConfig(**fields)
    return config


_MAX_CONFIGS = 8192
_VALIDATED: dict[tuple, TrainingConfig] = {}
_AT_LEVEL: dict[tuple[int, ActivationCheckpointing], tuple[TrainingConfig, TrainingConfig]] = {}
