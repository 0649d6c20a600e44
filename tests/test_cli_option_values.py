"""Option values converted without typer's adapters (hardware_selector_cli/option_values.py) are what typer's
adapters give: the same value, or the same error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer

from hardware_selector_cli.app import app
from hardware_selector_cli.option_values import _PlainConversion, convert_plainly

typer_coercion = pytest.importorskip("typer._coercion")

REPO_ROOT = Path(__file__).resolve().parent.parent
VALUES = [None, "4", "1024", "0", "04", "-1", " 4", "4.0", "0.5", "2.675", "1e3", "nan", "x", "", 3, 2.5, True, "a b"]


def _params(command):
    for param in command.params:
        if getattr(param, "type_descriptor", None) is not None:
            yield command, param
    for sub in getattr(command, "commands", {}).values():
        yield from _params(sub)


def _outcome(runtime, value, param, ctx):
    try:
        result = runtime.coerce(value, param=param, ctx=ctx)
        return type(result).__name__, repr(result)  # repr: nan is nan
    except Exception as error:  # the same class and message
        return type(error).__name__, str(error)


def test_every_option_converts_as_typer_does():
    command = typer.main.get_command(app)
    checked = 0
    for _owner, param in _params(command):
        typers = typer_coercion.build_runtime_param(param.type_descriptor)
        ours = _PlainConversion(param.type_descriptor)
        for value in VALUES:
            if param.multiple and value is not None:
                continue
            expected, got = _outcome(typers, value, param, None), _outcome(ours, value, param, None)
            assert got == expected, (param.name, value, got, expected)
            checked += 1
    assert checked > 500


def test_convert_plainly_sets_every_typed_parameter_and_the_help_option():
    command = convert_plainly(typer.main.get_command(app))
    plan = command.commands["plan"]
    assert all(isinstance(param._runtime_param, _PlainConversion) for _, param in _params(command))
    ctx = plan.make_context("plan", ["--model", "gpt2"], resilient_parsing=True)
    assert isinstance(plan.get_help_option(ctx)._runtime_param, _PlainConversion)


def _probe_stderr(probe: str) -> str:
    """Run `probe` in a fresh interpreter (nothing imported yet) and return its stderr; it must exit 0."""
    completed = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stderr.rstrip()


def test_plan_builds_no_adapter():
    """`plan` converts its options without typer's adapters (~45 ms of TypeAdapters, docs/performance.md)."""
    probe = (
        "import sys\nfrom hardware_selector import main\n"
        "code = main(['plan', '--model', 'gpt2-xl', '--gpu', 'V100-32GB', '--nodes', '1', '--seq-len', '1024', "
        "'--json'])\n"
        "print('ADAPTERS=' + str('typer._adapters' in sys.modules), file=sys.stderr)\nsys.exit(code)\n"
    )
    assert _probe_stderr(probe).endswith("ADAPTERS=False")


def test_a_commands_help_imports_no_pydantic():
    """`plan --help` no longer imports pydantic: its --help flag's value was converted with an adapter."""
    probe = (
        "import sys\nfrom hardware_selector_cli.app import main\ncode = main(['plan', '--help'])\n"
        "print('PYDANTIC=' + str('pydantic' in sys.modules), file=sys.stderr)\nsys.exit(code)\n"
    )
    assert _probe_stderr(probe).endswith("PYDANTIC=False")


@pytest.mark.parametrize("name", [info.name for info in app.registered_commands])
def test_a_command_alone_helps_and_refuses_as_in_the_whole_group(name, capsys):
    """`main` builds only the named command (hardware_selector_cli/app.py, `_click_command`): its help and its
    usage errors are those of the group of all commands."""
    from hardware_selector_cli.app import _click_command

    lean, whole = _click_command([name]), typer.main.get_command(app)
    assert list(lean.commands) == [name] and len(whole.commands) > 1
    outputs = []
    for group in (lean, whole):
        for argv in ([name, "--help"], [name, "--no-such-flag"]):
            try:
                group.main(args=argv, prog_name="hardware-selector", standalone_mode=False)
            except Exception as error:  # the usage error: its class and text
                outputs.append((type(error).__name__, str(error)))
            outputs.append(capsys.readouterr())
    assert outputs[: len(outputs) // 2] == outputs[len(outputs) // 2 :]
    assert _click_command(["db", "list"]).commands.keys() == whole.commands.keys()
