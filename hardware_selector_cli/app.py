"""Builds the Typer app and turns user errors into one line and exit code 2.

Heavy libraries (torch, transformers, deepspeed) are imported inside the
commands that need them, never at module level, so `--help` and planning a
catalog model stay fast.
"""

from __future__ import annotations

import copy
import functools
import importlib
import sys
from collections.abc import Mapping
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

import typer

from planner.errors import UserInputError

if TYPE_CHECKING:
    import click
    from pydantic import ValidationError

from .option_values import convert_plainly
from .pydantic_plugins import skip_lookup_without_plugins

# Each command's name -> the module that registers it, in the order `--help` lists them. A named command imports
# and registers its own module alone: the others' imports and option groups were ~2% of `plan`'s instructions.
COMMAND_MODULES = {
    "models": "models", "gpus": "hardware", "detect": "hardware", "estimate": "estimate", "plan": "plan",
    "tune": "tune", "train": "train", "watch": "watch", "report": "report", "db": "db",
}  # fmt: skip


def _flags_show_no_type() -> None:
    """typer (0.2x) shows a flag, --help included, as `--json <bool>` in help, yet a flag takes no value (`--json
    true` is an error): its options show their type unless they are flags."""
    from typer.core import TyperOption

    if getattr(TyperOption.display_type_rich, "flags_show_no_type", False):
        return
    shown = TyperOption.display_type_rich

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    display_type_rich.flags_show_no_type = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


@functools.cache
def _registered(modules: tuple[str, ...]) -> typer.Typer:
    """The Typer app with the commands of `modules` registered, in that order."""
    _flags_show_no_type()
    built = typer.Typer(
        name="hardware-selector",
        help="Plan distributed training: strategy, memory fit and speed.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},  # every command's (tests/test_honest_mistakes.py)
    )
    for name in modules:
        importlib.import_module(f"{__package__}.{name}").register(built)
    return built


def full_app() -> typer.Typer:
    """The app with every command registered, as `--help` lists them."""
    return _registered(tuple(dict.fromkeys(COMMAND_MODULES.values())))


def every_command() -> click.Command:
    """The app as one click group holding every command (for option_owners.py, on the error path)."""
    return typer.main.get_command(full_app())


def __getattr__(name: str) -> typer.Typer:
    """`app` is full_app(), built on first use: main builds a named command's module alone."""
    if name == "app":
        return full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def validation_message(error: ValidationError, flags: Mapping[str, str] | None = None) -> str:
    """One line from pydantic's report: our own UserInputError text when a validator raised one; a field that an
    option of the command sets (`flags`: field name -> flag, `lora_rank` -> `--lora-rank`) said in the words of
    the flag with the value given (`--lora-rank must be greater than or equal to 0, not -3`), as `train`'s run
    options are (planner/rundir/run_overrides.py); any other field by its name."""
    first = error.errors()[0]
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, UserInputError):
        return str(cause)
    location = first.get("loc", ())
    flag = (flags or {}).get(str(location[-1])) if location else None
    if flag is not None:
        problem = str(first["msg"]).removeprefix("Value error, ").replace("Input should be ", "")
        value = first.get("input")
        shown = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else f"{value!r}"
        return f"{flag} must be {problem}, not {shown}"
    where = ".".join(str(part) for part in location)
    return f"{where}: {first['msg']}" if where else first["msg"]


def command_flags(command: Any, args: list[str]) -> dict[str, str]:
    """The options of the (sub)command `args` name, by parameter name -> longest flag (`--lora-rank`); an
    option group's fields are named as its options (option_groups.py), so a model field refused by pydantic is
    said as the flag that set it."""
    for arg in args:
        subcommands = getattr(command, "commands", None)
        if not subcommands or arg not in subcommands:
            break
        command = subcommands[arg]
    return {
        param.name: max(param.opts, key=len)
        for param in getattr(command, "params", ())
        if param.name and any(opt.startswith("--") for opt in param.opts)
    }


def _validation_errors() -> tuple[type[ValidationError], ...]:
    """pydantic's ValidationError, once pydantic is imported (none is raised before): `--help` does not import it."""
    core = sys.modules.get("pydantic_core")
    return (core.ValidationError,) if core is not None else ()


def _click_exception_modules() -> list:
    """Typer >= 0.20 vendors its own click (typer._click) and raises its exceptions; older ones use click itself,
    imported only then (it costs start-up time)."""
    try:
        from typer._click import exceptions as vendored_click
    except ImportError:
        import click

        return [click.exceptions]
    return [vendored_click]


_CLICK_MODULES = _click_exception_modules()


def _classes(name: str) -> tuple[type, ...]:
    return tuple(getattr(module, name) for module in _CLICK_MODULES if hasattr(module, name))


USAGE_ERRORS = _classes("UsageError")
NO_ARGS_HELP = _classes("NoArgsIsHelpError")
NO_SUCH_OPTION = _classes("NoSuchOption")
OTHER_CLICK_ERRORS = _classes("ClickException")
ABORTS = _classes("Abort") + (typer.Abort,)
EXITS = _classes("Exit") + (typer.Exit,)


def _refuse_blank_text(command: click.Command) -> click.Command:
    """Every text option and argument of every command: a value given empty or blank is one line. `--gpu ""` (an
    unset shell variable) planned this machine's GPU as if --gpu were left out, `--model ""` asked for a model."""

    def checked(previous: Any, name: str, required: bool) -> Any:
        # A required argument cannot be left out (`db show ""` was told to, an audit).
        advice = "give it a value" if required else "give it a value, or leave it out"

        def callback(ctx: Any, param: Any, value: Any) -> Any:
            for item in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(item, (str, PurePath)) and not str(item).strip():  # a Path of blanks too
                    raise UserInputError(f"{name} is empty; {advice}")
            return previous(ctx, param, value) if previous is not None else value

        return callback

    for param in command.params:  # a value is text once converted only for a text parameter (paths are Paths)
        flags = [opt for opt in getattr(param, "opts", []) if opt.startswith("-")]
        name = max(flags, key=len) if flags else str(param.name).upper()  # --gpu, or RUN_ID
        param.callback = checked(param.callback, name, bool(getattr(param, "required", False)))
    for sub in getattr(command, "commands", {}).values():
        _refuse_blank_text(sub)
    return command


def _click_command(args: list[str]) -> click.Command:
    """The app as a click group. When the first argument names one of its commands (`plan ...`), the group holds
    that command alone, registered by its own module (COMMAND_MODULES): the same group, which runs it the same
    way, without importing the other commands' modules or building their option tables (docs/performance.md),
    and converts its option values without typer's adapters where that is plain (option_values.py). Anything
    else (--help, a group such as `db`, a misspelt name, which typer answers from all the names) builds every
    command, as typer does."""
    module = COMMAND_MODULES.get(args[0]) if args else None
    own = _registered((module,)) if module is not None else None
    chosen = [info for info in own.registered_commands if info.name == args[0]] if own is not None else []
    if own is None or len(chosen) != 1 or getattr(own, "_add_completion", True):
        return typer.main.get_command(full_app())
    lean = copy.copy(own)
    lean.registered_commands, lean.registered_groups = chosen, []
    return convert_plainly(typer.main.get_group(lean))


def usage_message(error: click.UsageError) -> str:
    """One line for click's usage error, ending in where the help is. A group or command run bare (no_args_is_help)
    raises one whose message is its help: typer's rich help prints itself and leaves the message empty, plain
    click's is the help text, printed here; the line then says what was missing, never an empty "error: ;"."""
    path = error.ctx.command_path if error.ctx else "hardware-selector"
    message = error.format_message().strip()
    if NO_ARGS_HELP and isinstance(error, NO_ARGS_HELP):
        if message:
            print(message)
        return f"{path} needs a command (listed above); run '{path} COMMAND --help' for one's options"
    # click ends its sentences with a period ("Missing argument 'run_dir'."); the hint follows after a semicolon
    owners = ""
    if NO_SUCH_OPTION and isinstance(error, NO_SUCH_OPTION) and error.option_name:
        from .option_owners import owners_hint  # builds every command: only here, on the error path

        owners = owners_hint(error.option_name, path, every_command)
    return f"{message.rstrip('.')}{owners}" + (f"; run '{path} --help'" if error.ctx else "")


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app and map errors to exit codes."""
    args = sys.argv[1:] if argv is None else argv
    if args and not args[0].startswith("-"):  # a command, which may build validators (--help imports no pydantic)
        skip_lookup_without_plugins()
    command = _refuse_blank_text(_click_command(args))
    try:
        result = command.main(args=argv, prog_name="hardware-selector", standalone_mode=False)
    except UserInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except _validation_errors() as error:
        print(f"error: {validation_message(error, command_flags(command, args))}", file=sys.stderr)
        return 2
    except USAGE_ERRORS as error:
        print(f"error: {usage_message(error)}", file=sys.stderr)
        return 2
    except OTHER_CLICK_ERRORS as error:
        print(f"error: {error.format_message()}", file=sys.stderr)
        return 2
    except ABORTS:
        print("aborted", file=sys.stderr)
        return 130
    except EXITS as exit_:
        return exit_.exit_code
    return result if isinstance(result, int) else 0
