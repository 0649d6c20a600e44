"""Every argument of the selector API, checked by name before anything is planned (docs/selector.md).

One table (RULES) says what each keyword argument takes, and `checked_arguments`
applies it to every call of a method, so no method can take an argument that
nothing checks: decorating one whose argument has no rule is an error at
import. A wrong type is a TypeError, a value out of range or not among the
accepted ones a ValueError (both UserInputErrors), one sentence naming the
argument and what it takes. Checks that relate two arguments (nvme_gbps needs
nvme_gb) stay in the method.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from enum import Enum
from typing import Any, ParamSpec, TypeVar

from planner.errors import UserInputError, UserInputTypeError, known_keywords
from planner.inference.request import KvFormat, ServingObjective, WeightFormat
from planner.limits import (
    MAX_BANDWIDTH_GBPS,
    MAX_BATCH,
    MAX_GIB,
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_SEQ_LEN,
    check_count,
    check_name,
    check_number,
)
from planner.search.request import Objective
from planner.training_config import Precision

P = ParamSpec("P")
R = TypeVar("R")
Check = Callable[[str, Any], object]


def whole(high: int) -> Check:
    """An int in [1, high]: no 8.0 for 8, no "8" and no True for 1."""

    def check(name: str, value: Any) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise UserInputTypeError(f"{name} must be an int from 1 to {high:,}, not {type(value).__name__} {value!r}")
        return check_count(name, value, high=high)

    return check


def number(high: float, *, positive: bool = False) -> Check:
    def check(name: str, value: Any) -> float:
        return check_number(name, value, high=high, low=0.0, low_inclusive=not positive)

    return check


def flag(name: str, value: Any) -> bool:
    """True or False only: a string such as "no" is true to Python and would mean the opposite of what it says."""
    if not isinstance(value, bool):
        raise UserInputTypeError(f"{name} must be True or False, not {type(value).__name__} {value!r}")
    return value


def names(example: str) -> Check:
    """A list (or tuple) of one or more strings; a lone string would be read letter by letter, and an empty list
    would ask for nothing (None is "any")."""

    def check(name: str, value: Any) -> list[str]:
        if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise UserInputTypeError(f"{name} must be a list of names such as {example}, not {value!r}")
        if not value:
            raise UserInputError(f"{name} is empty; name one or more, such as {example}, or pass None for any")
        return list(value)

    return check


def choice_of(name: str, kind: type[Enum], value: Any) -> Any:
    """An enum member by its value (any case, spaces around ignored)."""
    if isinstance(value, kind):
        return value
    accepted = ", ".join(repr(member.value) for member in kind)
    if not isinstance(value, str):
        raise UserInputTypeError(f"{name} must be one of {accepted}, not {type(value).__name__} {value!r}")
    try:
        return kind(value.strip().lower())
    except ValueError:
        raise UserInputError(f"{name} must be one of {accepted}, not {value!r}") from None


def choice(kind: type[Enum]) -> Check:
    return lambda name, value: choice_of(name, kind, value)


def path(name: str, value: Any) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise UserInputTypeError(f"{name} must be a path (str or os.PathLike), not {type(value).__name__} {value!r}")
    if not os.fspath(value).strip():
        raise UserInputError(f"{name} is empty; pass the benchmark database's path, or leave it out for the default")
    return os.fspath(value)


def name_or_path(name: str, value: Any) -> str:
    """A model's name, or the path of its folder or config.json as a str or an os.PathLike (pathlib.Path('my-gpt2')),
    which the selector reads as str(os.fspath(value))."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
        if not isinstance(value, str):  # a bytes path: no model name is bytes
            raise UserInputTypeError(f"{name} must be a str or a text path, not the bytes path {value!r}")
    if not isinstance(value, str):
        raise UserInputTypeError(f"{name} must be a string or a path (os.PathLike), not {value!r}")
    return check_name(name, value)


def one_of(*accepted: str) -> Check:
    def check(name: str, value: Any) -> str:
        shown = " or ".join(repr(option) for option in accepted)
        if not isinstance(value, str):
            raise UserInputTypeError(f"{name} must be {shown}, not {type(value).__name__} {value!r}")
        if value.strip().lower() not in accepted:
            raise UserInputError(f"{name} must be {shown}, not {value!r}")
        return value.strip().lower()

    return check


RULES: dict[str, Check] = {
    "model_family": check_name,
    "model_name": name_or_path,
    "gpu": check_name,
    "task_type": one_of("training", "inference"),
    "rank_by": one_of("cost", "throughput"),
    "gpu_count": whole(MAX_GPUS),
    "batch_size": whole(MAX_BATCH),
    "gpus_per_node": whole(MAX_GPUS_PER_NODE),
    "seq_len": whole(MAX_SEQ_LEN),
    "context": whole(MAX_SEQ_LEN),
    "output_tokens": whole(MAX_SEQ_LEN),
    "max_memory_gb": number(MAX_GIB, positive=True),
    "headroom_fraction": number(0.99),
    "nvme_gb": number(MAX_GIB),
    "nvme_gbps": number(MAX_BANDWIDTH_GBPS, positive=True),
    "objective": choice(Objective),
    "precision": choice(Precision),
    "weights": choice(WeightFormat),
    "kv_cache": choice(KvFormat),
    "allow_engine": flag,
    "distributed": flag,
    "include_detected": flag,
    "calibrate": flag,
    "db": path,
    "strategies": names("['FSDP']"),
    "candidates": names("['A100-80GB']"),
}
SERVING_RULES: dict[str, Check] = {"objective": choice(ServingObjective)}


def checked_arguments(**rules: Check) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """The method, its every argument checked by RULES (or `rules`, which replace them) before it runs; an unknown
    keyword is refused by known_keywords. None is taken where it is the argument's default."""

    def decorate(method: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(method)
        table = {**RULES, **rules}
        parameters = {name: p for name, p in signature.parameters.items() if name != "self"}
        unchecked = [name for name in parameters if name not in table]
        if unchecked:  # a bug of ours: an argument nothing checks
            raise TypeError(f"{method.__qualname__}: no rule for {', '.join(unchecked)} in planner/selector/arguments")
        called = method.__qualname__.removesuffix(".__init__")

        @functools.wraps(method)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as error:  # a missing argument, or too many given by position
                raise UserInputTypeError(f"{called}(): {error}") from None
            # A door with its own spelling (the seed CLI's flags) names its arguments so in every error.
            spelled = getattr(args[0], "argument_names", {}) if args else {}
            for name, value in bound.arguments.items():
                if name in parameters and not (value is None and parameters[name].default is None):
                    table[name](spelled.get(name, name), value)
            return method(*args, **kwargs)

        return known_keywords(checked)

    return decorate
