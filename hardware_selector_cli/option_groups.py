"""Share a group of Typer options between commands without repeating them.

`@option_group("model", model_options)` adds model_options' parameters to the
decorated command's signature (Typer reads signatures), and at call time
builds model_options(...) from them and passes it as the `model` argument.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

# A wrapper's options whose annotations it holds evaluated already: a decorator above it reuses them rather than
# evaluate them again (each of plan's 7 groups evaluated every option of the groups below it).
_EVALUATED = "__evaluated_options__"


def _option_hints(function: Callable[..., Any], params: list[inspect.Parameter]) -> dict[str, Any]:
    """The evaluated annotations of `params` that are options (a parameter with a default). The others, typer's
    Context and the groups that decorators above this one replace, and the return, are not evaluated: their types
    may be imported only when the command runs (--help builds no pydantic model); typer resolves Context itself."""
    options = {param.name for param in params if param.default is not inspect.Parameter.empty}
    evaluated = getattr(function, _EVALUATED, frozenset()) & options
    annotations = {key: value for key, value in function.__annotations__.items() if key in options - evaluated}
    globalns = getattr(inspect.unwrap(function), "__globals__", {})
    hints = typing.get_type_hints(types.SimpleNamespace(__annotations__=annotations), globalns=globalns)
    return {**{key: function.__annotations__[key] for key in evaluated}, **hints}


def option_group(name: str, factory: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    group_params = list(inspect.signature(factory).parameters.values())
    group_names = [param.name for param in group_params]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command_sig = inspect.signature(command)
        own = [param for param in command_sig.parameters.values() if param.name != name]
        clashes = set(group_names) & {param.name for param in own}
        if clashes:
            raise TypeError(f"option group '{name}' clashes with {sorted(clashes)}")

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            group_kwargs = {key: kwargs.pop(key) for key in group_names}
            kwargs[name] = factory(**group_kwargs)
            return command(**kwargs)

        # Typer reads annotations through get_type_hints: give it both sets, the options evaluated.
        # The group's own name may also be one of the factory's options (`model`), so
        # drop it from the command's hints before merging, not after.
        command_hints = {key: value for key, value in command.__annotations__.items() if key not in ("return", name)}
        hints = {**command_hints, **_option_hints(command, own), **_option_hints(factory, group_params)}
        resolved = [param.replace(annotation=hints.get(param.name, param.annotation)) for param in own + group_params]
        wrapper.__signature__ = command_sig.replace(parameters=resolved)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {key: value for key, value in hints.items() if key != "return"}
        options = [param.name for param in own + group_params if param.default is not inspect.Parameter.empty]
        setattr(wrapper, _EVALUATED, frozenset(options))
        return wrapper

    return decorate
