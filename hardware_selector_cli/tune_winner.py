"""tune's winner written out: into --emit DIR, or into RUN_DIR itself (docs/running.md, "tune").

A RUN_DIR already trained (checkpoints/ or final/ holding something, metrics, a status) keeps that run where
it is when the winner is the folder's own plan: only its plan.json's measured step and tune block change, and
the run resumes as it would have. A winner of another plan would leave the trained state behind it, so it is
moved aside (kept under previous/<time>/) only with --force; without it the tune refuses in one line, before
the folder is touched, naming what would move (its trials are records: the same tune reads them back).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import UserInputError

if TYPE_CHECKING:  # pydantic: `--help` imports this module and no pydantic (tests/test_cli_startup.py)
    from planner.plan import Plan

# What makes a folder a trained run that a winner of another plan must not silently push aside.
TRAINED = ("checkpoints", "final")


def refuse_while_training(run_dir: Path) -> None:
    """One line when `train` holds the folder: re-emitting it would move its checkpoints from under it."""
    from backends.runner.run_lock import refuse_if_held

    from .plan import REEMIT_WHILE_TRAINING

    refuse_if_held(run_dir, REEMIT_WHILE_TRAINING)


def write_winner(
    best: Plan,
    label: str,
    folder: Path,
    *,
    own_folder: bool,
    force: bool,
    tune: dict[str, Any],
    options,
    elastic,
    search,
) -> None:
    """Emit `best` (the winner, `label`) into `folder`: RUN_DIR when `own_folder`, else --emit's."""
    from planner.rundir.previous_run import previous_run_state
    from planner.rundir.write import CLI_NAMES, emit_run_folder

    keep_state = False
    previous: list[str] = []
    if own_folder or force:
        folder = folder.expanduser().resolve()
        refuse_while_training(folder)
        previous = previous_run_state(folder) if folder.is_dir() else []
    if own_folder and previous:
        keep_state = _same_plan(folder, best)
        trained = [name for name in previous if name in TRAINED]
        if not keep_state and trained and not force:
            raise UserInputError(
                f"{folder} holds a trained run ({', '.join(trained)}) and the winner, {label}, is not its plan: "
                f"--force moves {', '.join(previous)} aside to {folder / 'previous'}/<time>/ (kept), or --emit "
                "OTHER_DIR writes the winner there; the trials are recorded, so the same tune reads them back"
            )
    emit_run_folder(
        best,
        folder,
        force=own_folder or force,
        options=options,
        tune=tune,
        elastic=elastic,
        search=search,  # the search tune ran: a later `tune RUN_DIR` runs it again
        keep_state=keep_state,
        names=CLI_NAMES,
    )
    if keep_state:
        print(
            f"kept the trained run's {', '.join(previous)} in {folder}: the winner is its own plan (its plan.json "
            "now holds the trials and the measured step)",
            file=sys.stderr,
        )
    elif previous:
        from .plan_lines import moved_run_line

        print(moved_run_line(folder, previous), file=sys.stderr)
    print(f"wrote the winner ({label}) to {folder}; its plan.json names the trials", file=sys.stderr)


def _same_plan(folder: Path, best: Plan) -> bool:
    """Whether the winner is the plan the folder was trained under: the same config on the same cluster."""
    from planner.rundir.plan_file import read_plan_file

    plan, _ = read_plan_file(folder)
    return plan.config == best.config and plan.cluster.world_size == best.cluster.world_size
