"""Every flag the README and docs/ give a command is one that command takes.

Found by a new user's audit: docs/running.md's table of plan.json's blocks named `plan --nproc`, which plan
refuses ("No such option"). `train` is left out: it passes the runner's own flags through (backends/run.py).
"""

from __future__ import annotations

import re

import typer
from project_sources import REPO

from hardware_selector_cli.app import app

# `hardware-selector CMD ...` or `CMD ...` in backticks, up to the end of the span or the line.
COMMAND = re.compile(
    r"(?:hardware-selector |`)(plan|tune|watch|report|estimate|detect|models|gpus|db \w+)((?: [^`\n]*?)?)(?:`|\n)"
)
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def command_flags() -> dict[str, set[str]]:
    flags: dict[str, set[str]] = {}

    def collect(command, path: list[str]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                collect(sub, [*path, name])
            return
        flags[" ".join(path)] = {"--help"} | {
            name for param in command.params for name in (*param.opts, *param.secondary_opts)
        }

    collect(typer.main.get_command(app), [])
    return flags


def test_every_flag_the_docs_give_a_command_is_one_it_takes():
    flags = command_flags()
    unknown = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = path.read_text(encoding="utf-8").replace("\\\n", " ")
        for match in COMMAND.finditer(text):
            command, rest = match.groups()
            unknown += [
                f"{path.relative_to(REPO)}: {command} {flag}"
                for flag in FLAG.findall(rest)
                if flag not in flags[command]
            ]
    assert not unknown
