"""Which commands take an option a user gave to another one: `plan --resume-from` is `train`'s (docs/errors.md).

Built only on the error path: the asker hands in every command (app.every_command) and the runner's options, which
`train` passes on (backends/runner/options.py), so that "No such option" can say where the option lives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TRAIN = "hardware-selector train"
HELP_FLAGS = ("-h", "--help")  # every command's: never "an option of" one


def _click_commands(command: Any, path: str) -> dict[str, set[str]]:
    """Each command path below `command` and the option strings it declares."""
    subcommands = getattr(command, "commands", None)
    if subcommands:
        found: dict[str, set[str]] = {}
        for name, sub in subcommands.items():
            found |= _click_commands(sub, f"{path} {name}")
        return found
    return {path: {flag for param in command.params for flag in (*param.opts, *param.secondary_opts)}}


def runner_flags() -> set[str]:
    """The options `train` passes on to the runner (what `train` takes beyond its own)."""
    from backends.runner.options import runner_parser

    internal = {"--plan", "--local_rank", "--local-rank"}  # train sets --plan itself; the launcher's rank
    return set(runner_parser()._option_string_actions) - internal  # argparse keeps no public list of its options


def commands_with(option: str, root: Any) -> list[str]:
    """The commands (full paths, `hardware-selector plan`) below the click group `root` that take `option`."""
    owners = _click_commands(root, "hardware-selector")
    owners.setdefault(TRAIN, set()).update(runner_flags())
    return sorted(path for path, flags in owners.items() if option in flags and option not in HELP_FLAGS)


# What `plan` searches instead of taking it (training and serving alike): said where it is given to plan (--tp is
# plan's own for serving: hardware_selector_cli/serving.py).
PLAN_SEARCHES = {
    "--pp": "the pipeline stages over the cluster (--nodes and --gpus-per-node bound them)",
}


def owners_hint(option: str, asked: str, every_command: Callable[[], Any]) -> str:
    """ "; --emit is an option of `hardware-selector plan`", or "" where no other command takes it."""
    if asked.endswith(" plan") and option in PLAN_SEARCHES:
        return (
            f"; `plan` searches {PLAN_SEARCHES[option]}, training or serving alike; `estimate {option}` times one "
            "training layout"
        )
    others = [
        f"`{path.removeprefix('hardware-selector ')}`"
        for path in commands_with(option, every_command())
        if path != asked
    ]
    if not others:
        return ""
    named = others[0] if len(others) == 1 else f"{', '.join(others[:-1])} and {others[-1]}"
    return f"; {option} is an option of {named}"
