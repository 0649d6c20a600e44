"""Option values converted without building a pydantic TypeAdapter where the conversion is plain
(docs/performance.md, "Planner speed").

typer >= 0.2x converts every option's value, given or not, through a pydantic TypeAdapter that it builds on the
option's first use (typer/_coercion.py, `build_runtime_param`): `plan` built 73 of them, ~45 ms, although most of
its options are left out (their value is None, which typer returns before its adapter is used) and the rest
are text, whole numbers or decimals given as such. `convert_plainly` gives each option a converter that answers
those cases itself, with typer's own result:

- no value: None, or () for an option taking several values (typer's `RuntimeParam.coerce`);
- a `str` option's text, an `int` or `float` option's number already of that type: the value itself;
- an `int` option's digits ("4", "1024"; no sign, no leading zero, no blanks) and a `float` option's
  digits with at most one point between digits ("0.5", "3"; no leading zero before other digits): int(text)
  and float(text), the numbers pydantic's lax mode gives (it parses the same text; both round correctly).

Anything else (other types, bounds, parsers, files, lists given, text that is not such a number) goes to the
adapter typer builds, built on first need as before, so its conversions and error messages are unchanged.
With an older typer (no `typer._coercion`), commands are left as they are.
"""

from __future__ import annotations

import re
from typing import Any

# compiled on first use (re caches them): `--help` converts no number
_DIGITS = r"0|[1-9][0-9]{0,17}"
_DECIMAL = r"(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?"


class _PlainConversion:
    """typer's runtime converter of one option (what `get_runtime_param` returns), built only when needed."""

    __slots__ = ("_descriptor", "_kind", "_built")

    def __init__(self, descriptor: Any) -> None:
        self._descriptor = descriptor
        info = descriptor.parameter_info
        plain = (
            descriptor.file_annotation is None
            and info.parser is None
            and info.min is None
            and info.max is None
            and not info.clamp
        )
        annotation = descriptor.annotation
        self._kind = annotation if plain and annotation in (str, int, float) else None
        self._built: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:
            return () if param.multiple or param.nargs == -1 else None
        kind = self._kind
        if kind is not None and not param.multiple and param.nargs == 1:
            if type(value) is kind:
                return value
            if type(value) is str:
                if kind is int and re.fullmatch(_DIGITS, value):
                    return int(value)
                if kind is float and re.fullmatch(_DECIMAL, value):
                    return float(value)
        return self._runtime().coerce(value, param=param, ctx=ctx)

    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        return self._runtime()._coerce_value(value, param=param, ctx=ctx)

    def _runtime(self) -> Any:
        if self._built is None:
            from typer._coercion import build_runtime_param

            self._built = build_runtime_param(self._descriptor)
        return self._built


def convert_plainly(command: Any) -> Any:
    """Every parameter of `command` and its subcommands that typer would convert with an adapter built on first
    use gets a `_PlainConversion` instead (not one already built); so does each command's --help option, which
    typer makes on first use (its value, None unless given, was converted with an adapter too)."""
    for param in command.params:
        _convert_plainly(param)
    if hasattr(command, "_help_option"):
        make_help_option = command.get_help_option

        def get_help_option(ctx: Any) -> Any:
            option = make_help_option(ctx)
            if option is not None:
                _convert_plainly(option)
            return option

        command.get_help_option = get_help_option
    for sub in getattr(command, "commands", {}).values():
        convert_plainly(sub)
    return command


def _convert_plainly(param: Any) -> None:
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is not None and hasattr(param, "get_runtime_param") and param._runtime_param is None:
        param._runtime_param = _PlainConversion(descriptor)
