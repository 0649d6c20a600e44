"""A TrainingConfig but its batch as a tuple of plain values, for the estimators' caches.

The config and its nested models (layout, routing) are frozen pydantic
models: hashable, but their __hash__ and __eq__ are Python code run for each
nested model, and a cache lookup pays both. Two configs with the same values
give the same tuple, so a cache keyed by it is exact, and hashing and comparing
ints, floats, enums and small tuples is C code. The micro-batch and the
accumulation are left out: a cache keyed by this tuple holds the batches of one
config below it, so a caller asking about many batches (the search) builds the
key once. The key of one config object is remembered (configs are frozen): the
search keys its memory and its throughput caches by the same configs.
"""

from __future__ import annotations

from operator import itemgetter

from planner.training_config import TrainingConfig

_NESTED = ("layout", "routing")
_BATCH = ("micro_batch", "grad_accum")
_FLAT = itemgetter(*[name for name in TrainingConfig.model_fields if name not in _NESTED + _BATCH])


# id(config) -> (config, its key); holding the config keeps its id from being reused while the entry lives.
_KEYS: dict[int, tuple[TrainingConfig, tuple]] = {}


def config_key_without_batch(config: TrainingConfig) -> tuple:
    """Every field's value but the micro-batch's and the accumulation's, the nested models' fields spelled out."""
    entry = _KEYS.get(id(config))
    if entry is not None and entry[0] is config:
        return entry[1]
    values = config.__dict__
    key = (_FLAT(values), *values["layout"].__dict__.values(), *values["routing"].__dict__.values())
    if len(_KEYS) >= 8192:
        _KEYS.clear()
    _KEYS[id(config)] = (config, key)
    return key
