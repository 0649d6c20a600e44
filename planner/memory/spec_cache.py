"""Cache what is derived from a ModelSpec alone, for the search's inner loop.

ModelSpec is frozen but not hashable (it holds lists), so functools.lru_cache
cannot key on it. The search evaluates thousands of configurations of the
same spec object: keying on its identity is exact, and holding the spec in
the entry keeps its id from being reused while the entry lives.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from planner.models.spec import ModelSpec

T = TypeVar("T")
MAX_SPECS = 256


def per_spec(function: Callable[[ModelSpec], T]) -> Callable[[ModelSpec], T]:
    entries: dict[int, tuple[ModelSpec, T]] = {}

    @functools.wraps(function)
    def cached(spec: ModelSpec) -> T:
        entry = entries.get(id(spec))
        if entry is not None and entry[0] is spec:
            return entry[1]
        if len(entries) >= MAX_SPECS:
            entries.clear()
        value = function(spec)
        entries[id(spec)] = (spec, value)
        return value

    cached.cache_clear = entries.clear  # type: ignore[attr-defined]
    return cached


def per_spec_and_key(function: Callable[..., T]) -> Callable[..., T]:
    """Like per_spec, for functions of a spec and further hashable arguments."""
    entries: dict[tuple, tuple[ModelSpec, T]] = {}

    @functools.wraps(function)
    def cached(spec: ModelSpec, *key) -> T:
        full_key = (id(spec), *key)
        entry = entries.get(full_key)
        if entry is not None and entry[0] is spec:
            return entry[1]
        if len(entries) >= MAX_SPECS * 64:
            entries.clear()
        value = function(spec, *key)
        entries[full_key] = (spec, value)
        return value

    cached.cache_clear = entries.clear  # type: ignore[attr-defined]
    return cached
