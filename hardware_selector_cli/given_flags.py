"""Which options the user gave, whatever their values: click records where each value came from.

A check that compares an option with its default misses the flag given at its default value: `tune RUN_DIR
--optimizer adamw` on a folder planned with sgd, or `--ac none,selective,full` beside a folder searched with
`--ac none`, was dropped without a word. Click's parameter source says whether the value came from the command
line (or an environment variable) or from the default.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def given_flags(ctx: Any, *groups: Callable[..., Any]) -> list[str]:
    """The options of `ctx`'s command that the user set, by their longest name (`--gpu`, not `-g`), in the
    command's order; only those of the option-group factories `groups` when any are named (option_groups.py)."""
    names = {name for group in groups for name in inspect.signature(group).parameters} if groups else None
    flags = []
    for param in ctx.command.params:
        if names is not None and param.name not in names:
            continue
        source = ctx.get_parameter_source(param.name)
        if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT") and param.opts:
            flags.append(max(param.opts, key=len))
    return flags
