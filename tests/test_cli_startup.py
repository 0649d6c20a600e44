"""The CLI's cheap paths stay cheap, and `models --json` is the documented shape.

"Cheap" is checked by what is imported, not by timing: `--help`, `models` and
`gpus` must not import torch, transformers or deepspeed (those cost seconds).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hardware_selector_cli.app import main
from planner.models.catalog import load_catalog

REPO_ROOT = Path(__file__).resolve().parent.parent
HEAVY_MODULES = ("torch", "transformers", "deepspeed", "accelerate")

PROBE = """
import sys
from hardware_selector_cli.app import main
code = main({argv!r})
heavy = sorted(name for name in {heavy!r} if name in sys.modules)
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.parametrize(
    "argv", [["--help"], ["models"], ["models", "--json"], ["gpus"], ["models", "--search", "llama"]]
)
def test_cheap_commands_do_not_import_heavy_libraries(argv):
    completed = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv, heavy=HEAVY_MODULES)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    assert "HEAVY=\n" in completed.stderr or completed.stderr.rstrip().endswith("HEAVY="), completed.stderr


def test_help_imports_no_pydantic():
    """`--help` imports no pydantic: importing it and building the models the CLI modules imported cost ~0.13 s of
    --help's 0.34 s CPU (docs/performance.md, Planner speed); the modules import the models where a command runs.
    (A command's own --help does import pydantic: typer converts option values with it.)"""
    completed = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=["--help"], heavy=("pydantic", "pydantic_core"))],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr.rstrip().endswith("HEAVY="), completed.stderr


def test_models_json_lists_the_catalog_with_the_documented_keys(capsys):
    assert main(["models", "--json"]) == 0
    models = json.loads(capsys.readouterr().out)
    assert isinstance(models, list) and len(models) >= 40
    required = {
        "name",
        "aliases",
        "family",
        "params",
        "active_params",
        "hidden_size",
        "num_layers",
        "num_heads",
        "num_kv_heads",
        "vocab_size",
    }
    for entry in models:
        assert required <= entry.keys(), entry["name"]
    by_name = {entry["name"]: entry for entry in models}
    catalog = {spec.name: spec for spec in load_catalog()}
    assert by_name.keys() == catalog.keys()
    for name, entry in by_name.items():
        assert entry["params"] == catalog[name].params.total
        assert entry["params_source"].startswith("meta-device")
    mixtral = by_name["mixtral-8x7b"]
    assert 12e9 < mixtral["active_params"] < 13.5e9 < 46e9 < mixtral["params"]  # Mistral AI: 12.9B of 46.7B
    assert by_name["llama-2-7b"]["active_params"] == by_name["llama-2-7b"]["params"]


def test_models_search_filters(capsys):
    assert main(["models", "--search", "qwen2.5", "--json"]) == 0
    names = [entry["name"] for entry in json.loads(capsys.readouterr().out)]
    assert names and all(name.startswith("qwen2.5") for name in names)


def test_script_runs_from_the_checkout():
    completed = subprocess.run(
        [sys.executable, "hardware_selector.py", "models", "--json"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    assert len(json.loads(completed.stdout)) >= 40


def test_unknown_command_is_one_line_and_exit_2(capsys):
    assert main(["modles"]) == 2
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if line.strip()]) == 1


def test_every_command_is_found_by_its_name_in_the_module_that_registers_it():
    """main registers a named command's module alone (app.COMMAND_MODULES); a command missing from that table, or
    listed under another module, would fall back to the whole app or not be found there."""
    from hardware_selector_cli.app import COMMAND_MODULES, _registered, full_app

    whole = full_app()
    names = [info.name for info in whole.registered_commands] + [info.name for info in whole.registered_groups]
    assert sorted(names) == sorted(COMMAND_MODULES)
    for name, module in COMMAND_MODULES.items():
        own = _registered((module,))
        assert name in [info.name for info in own.registered_commands] + [g.name for g in own.registered_groups]
