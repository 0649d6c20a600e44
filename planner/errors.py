"""Errors caused by what the user asked for, as opposed to bugs.

The CLI prints a UserInputError as one line and exits with code 2; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class UserInputError(ValueError):
    """Bad input: the message says what is wrong and what to do instead, on one line (docs/errors.md).

    A value the user gave is often quoted in the message and may hold a line break (an --image pasted with
    one): breaks are shown escaped, so the message stays one line wherever it is printed."""

    def __init__(self, message: object = "", *args: object) -> None:
        text = str(message)
        if any(char in text for char in "\n\r\v\f"):
            text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\v", "\\v").replace("\f", "\\f")
        super().__init__(text, *args)


class UserInputTypeError(UserInputError, TypeError):
    """Bad input of the wrong type (gpu_count="two", model_name=123): a ValueError and a TypeError both."""


class ConfigFieldError(UserInputError):
    """A model config.json that is missing a field or holds a wrong value."""

    def __init__(self, source: str, field: str, problem: str):
        self.source = source
        self.field = field
        super().__init__(f"{source}: field '{field}' {problem}")


def did_you_mean(word: str, valid: list[str]) -> str:
    """ "did you mean 'x'? " for the closest of `valid` to a misspelt `word`, or "" when none is close."""
    close = difflib.get_close_matches(word, valid, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


class UnknownKeywordError(UserInputTypeError):
    """A keyword argument the function does not take (a TypeError, as Python's own, and a UserInputError).

    `listed`: how the line names the valid keywords when they are too many to list (transformers'
    TrainingArguments has over a hundred); by default it lists them."""

    def __init__(self, function: str, keyword: str, valid: list[str], listed: str | None = None):
        where = listed or f"its keywords are {', '.join(valid)}"
        super().__init__(f"{function}() takes no keyword {keyword!r}; {did_you_mean(keyword, valid)}{where}")


def refuse_unknown_keywords(function: str, keywords: Iterable[object], valid: list[str]) -> None:
    """Raise UnknownKeywordError for the first of `keywords` not in `valid` (a pydantic model's fields as much as a
    function's parameters: ignored, a misspelt key would give another answer without a word)."""
    for keyword in keywords:
        if keyword not in valid:
            raise UnknownKeywordError(function, str(keyword), valid)


def known_keywords(function: Callable[P, R]) -> Callable[P, R]:
    """`function`, refusing an unknown keyword argument in one line (UnknownKeywordError) instead of Python's bare
    TypeError: the line names the keyword, the closest valid one and all of them, so a typo says its fix."""
    parameters = inspect.signature(function).parameters.values()
    if any(p.kind == p.VAR_KEYWORD for p in parameters):  # a bug of ours: its **kwargs would all be refused
        raise TypeError(f"known_keywords cannot check {function.__qualname__}, which takes **kwargs")
    valid = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]
    qualified = function.__qualname__  # the name the user called: CheckpointManager(...), or the method's own
    name = qualified.removesuffix(".__init__") if qualified.endswith(".__init__") else function.__name__

    @functools.wraps(function)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        refuse_unknown_keywords(name, kwargs, valid)
        return function(*args, **kwargs)

    return checked


def spelled(names: Mapping[str, str], keyword: str, value: object = None) -> str:
    """How the asking door says `keyword` (set to `value`), for an error's advice: a command line's flag when
    `names` maps it (`{"force": "--force"}`: "--force", "--gpu L4"), else the Python keyword the API takes
    ("force=True", "gpu='L4'"); without a value, the name alone. The CLI passes its flags, the API nothing, so
    a caller of the Python API is never told to pass a flag it cannot."""
    flag = names.get(keyword)
    shown = f"{value:g}" if isinstance(value, float) else repr(value) if flag is None else str(value)
    if flag is not None:
        return flag if value is None or value is True else f"{flag} {shown}"
    return keyword if value is None else f"{keyword}={shown}"
