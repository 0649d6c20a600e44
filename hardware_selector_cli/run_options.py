"""`plan --emit` options for the run itself: data, weights, tokenizer, length, learning rate, checkpoints.

The options are the rows of planner/rundir/run_option_table.py marked `at_emit`, rendered here as typer
options (the runner and `train` render the same rows as argparse). Their values become a RunOverrides applied
to the emitted run's RunConfig, the same way `train DIR --steps 100` changes one run (docs/running.md). Given
without --emit they are an error, never ignored.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from planner.errors import UserInputError
from planner.rundir.run_option_table import RUN_OPTIONS, RunOption, given_flags

_HELP = "(with --emit)"
EMIT_OPTIONS = tuple(option for option in RUN_OPTIONS if option.at_emit)


@dataclass
class RunOptionValues:
    values: dict[str, Any]  # RunOverrides field -> the value given, or None

    def given(self) -> list[str]:
        return given_flags(self.values)

    def overrides(self) -> Any:
        from planner.rundir.run_overrides import overrides_from

        return overrides_from(self.values)


def emit_folder(value: str | None) -> Path | None:
    """--emit's folder; an empty or blank one is an error, never the current folder (whose files --force would
    replace), and so is a place where it cannot be written."""
    if value is None:
        return None
    if not value.strip():
        raise UserInputError("--emit needs a folder name; an empty path would write into the current folder")
    from planner.files import check_writable

    folder = Path(value).expanduser()
    if folder.is_symlink() and not folder.exists():  # the run would be made wherever the link points
        raise UserInputError(f"--emit {value} links to {os.readlink(folder)}, which does not exist; create it, or "
                             "remove the link")  # fmt: skip
    if folder.is_file():  # not "choose a writable location": a file is in the way
        raise UserInputError(f"--emit {value} is a file, and --emit names a run folder; move the file aside or "
                             "choose another folder")  # fmt: skip
    try:  # a place that refuses the folder fails now, not after the search (or a tune's trials)
        check_writable(folder / "plan.json")
    except UserInputError as error:
        raise UserInputError(f"--emit: {error}") from None
    return Path(value)


def _typer_parameter(option: RunOption) -> inspect.Parameter:
    kind = list[str] if option.many else option.kind
    help_text = option.help[0].upper() + option.help[1:]
    if option.choices:
        help_text = f"{'|'.join(option.choices)}: {help_text}"
    return inspect.Parameter(
        option.key,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        default=typer.Option(None, option.flag, help=f"{help_text} {_HELP}."),
        annotation=kind | None,
    )


def run_option_values(**values: Any) -> RunOptionValues:
    for option in EMIT_OPTIONS:
        value = values.get(option.key)
        if option.choices and value is not None and value not in option.choices:
            allowed = ", ".join(option.choices[:-1]) + f" or {option.choices[-1]}"
            raise UserInputError(f"{option.flag} must be {allowed}, not '{value}'")
    return RunOptionValues(
        {key: (value or None) if isinstance(value, list) else value for key, value in values.items()}
    )


# Typer (and option_groups.py) read the factory's signature: one keyword parameter per row of the table.
run_option_values.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [_typer_parameter(option) for option in EMIT_OPTIONS], return_annotation=RunOptionValues
)
run_option_values.__annotations__ = {
    **{option.key: (list[str] if option.many else option.kind) | None for option in EMIT_OPTIONS},
    "return": RunOptionValues,
}
