"""`train RUN_DIR [runner options]`: check a run folder, then run it under torchrun with the one runner.

Every option after the folder that is not the command's own (--nproc,
--max-restarts, --dry-run) goes to `python -m backends.run` unchanged
(--data, --steps, --lr, --tiny, ...; see docs/running.md). The options and
the folder are checked here first, with the runner's own parser and
reader, so a bad input is one line and exit 2 before any process starts;
a failure inside the ranks ends in the rank's one line, with torchrun's
report kept in RUN_DIR/logs/ (launcher_output.py). Nothing heavy is
imported: the training processes import torch.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import typer

from planner.errors import UserInputError

CPU_RANKS_PER_CORE = 4  # gloo ranks sharing a core past this spend their time switching, not training


def checked_runner_args(run_dir: Path, forwarded: list[str]) -> tuple:
    """The runner's parsed options for this folder, and the RunSpec they give (one-line errors)."""
    from backends.runner.options import load_checked_folder, parse_args

    try:
        args = parse_args(["--plan", str(run_dir), *forwarded], prog="hardware-selector train")
    except UserInputError as error:
        raise UserInputError(f"{error}{_owners_of_unknown(forwarded)}") from None
    spec = load_checked_folder(args)
    from backends.runner.output_paths import check_output_paths

    check_output_paths(args)  # every path the run writes, before torchrun starts
    from backends.adapters import adapter_class
    from backends.runner.anomaly import refuse_unsupported

    door = "the HF Trainer door" if args.trainer else spec.strategy.display_name
    before_update = not args.trainer and adapter_class(spec.strategy.value).supports_skip_before_update
    refusal = refuse_unsupported(spec.run.anomaly, door, before_update)
    if refusal:  # before torchrun, not after every rank's start-up
        raise UserInputError(refusal)
    return args, spec


def _owners_of_unknown(forwarded: list[str]) -> str:
    """Where the first option train does not take lives (`train --gpu`: plan's), or ""."""
    from .app import every_command
    from .option_owners import TRAIN, owners_hint, runner_flags

    known = runner_flags()
    unknown = next(
        (word.split("=")[0] for word in forwarded if word.startswith("--") and word.split("=")[0] not in known), None
    )
    return owners_hint(unknown, TRAIN, every_command) if unknown else ""


def torchrun_command(run_dir: Path, *, nproc: int, max_restarts: int, forwarded: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={max_restarts}",
        "--standalone",
        "-m",
        "backends.run",
        "--plan",
        str(run_dir),
        *forwarded,
    ]


# Ctrl-C during the checks: nothing was launched and nothing written (the checks only read; the lock goes with
# this process; the ranks, not train, move a smoke test's state aside), so the next `train` starts where this
# one would have.
INTERRUPTED_BEFORE_LAUNCH = (
    "interrupted: {signal} during train's checks, before torchrun started; nothing ran, and the next "
    "`hardware-selector train` starts where this one would have"
)


def _prepare(run_dir: Path, forwarded: list[str], *, nproc: int | None, max_restarts: int, dry_run: bool):
    """Every check before torchrun (one-line errors), then the lock: (spec, command, lock, where the next `train`
    starts if this one is stopped, the environment telling the ranks the lock is held); None for --dry-run."""
    args, spec = checked_runner_args(run_dir, forwarded)
    run = spec.run
    count = nproc or run.nproc_per_node
    if spec.elastic is not None:  # the layout plan.json holds for this many processes, or one line
        from planner.rundir.replan import plan_for_world

        _, run = plan_for_world(spec.plan, run, spec.elastic, count, count)
    cores = os.cpu_count() or 1
    if run.device == "cpu" and count > CPU_RANKS_PER_CORE * cores:
        raise UserInputError(
            f"--nproc {count}: {count} CPU processes on this machine's {cores} cores would crawl; "
            f"start at most {CPU_RANKS_PER_CORE * cores} (a CPU run is a rehearsal: the plan's GPUs set its speed)"
        )
    if count % run.layout.model_parallel:
        raise UserInputError(
            f"--nproc {count} cannot hold this plan's tensor x pipeline parallel layout of "
            f"{run.layout.model_parallel} ranks; pass a multiple of {run.layout.model_parallel}"
        )
    from backends.runner.world import fit_to_world

    try:  # the ranks' own fitting (the global batch must split over the data-parallel ranks), before torchrun
        fit_to_world(run, count, tiny=args.tiny, local_world=count)
    except UserInputError as error:
        raise UserInputError(f"--nproc {count}: {error}" if nproc else str(error)) from None
    command = torchrun_command(run_dir.resolve(), nproc=count, max_restarts=max_restarts, forwarded=forwarded)
    from backends.cpu_distributed import lacks_cuda_for, runs_on_cpu_instead  # imports torch: only here

    if spec.ds_config is not None and (run.device == "cpu" or lacks_cuda_for(run.device)):
        from backends.adapters.deepspeed_cuda_only import refuse_cuda_only_keys_on_cpu

        # ZeRO++ where the ranks would run on CPU: its own reason, before "pass --tiny" (which could not run it)
        refuse_cuda_only_keys_on_cpu(spec.ds_config)
    if run.device == "cuda" and not args.tiny:
        runs_on_cpu_instead("cuda", tiny=False)  # the one-line error on a machine without CUDA
    from backends.runner.preflight import check_resume, preflight
    from backends.runner.run_lock import HELD_ENV, hold_run_lock, refuse_if_held

    # Data, tokenizer, weights: seconds here instead of after every rank starts. They only read the
    # user's files, so they come before the lock: a refused run leaves the folder as it was.
    preflight(run, tiny=args.tiny, run_dir=spec.run_dir)
    resume_checks = (
        _trainer_resume_check(spec.run_dir, args)
        if args.trainer
        else partial(
            check_resume,
            spec.run_dir,
            run,
            tiny=args.tiny,
            strategy=spec.strategy.value,
            resume_from=args.resume_from,
            reset_data_position=args.reset_data_position,
        )
    )
    if dry_run:  # every check a launch would make, none of its effects: the lock is looked at, not taken
        refuse_if_held(spec.run_dir)
        resume_checks()
        print(shlex.join(command))
        return None
    lock = hold_run_lock(spec.run_dir)  # held while torchrun runs (the caller keeps it); its ranks skip it
    resumes_from = resume_checks()
    from backends.runner.status import record_stopped_launch

    then, resumed_by = _next_start(spec.run_dir, args, resumes_from, resume=run.checkpoint.resume)
    stopped = partial(record_stopped_launch, spec.run_dir, then=then, command=resumed_by)
    return spec, command, lock, stopped, {HELD_ENV: str(spec.run_dir.resolve())}


def _trainer_resume_check(run_dir: Path, args: Any) -> Callable[[], Path | None]:
    """Under --trainer the runner's checkpoint checks do not apply: --resume-from must name a Trainer
    checkpoint-<N> (backends/runner/trainer.py), checked here, before any rank starts."""

    def check() -> Path | None:
        if args.resume_from is None:
            return None
        from backends.runner.trainer import trainer_checkpoint

        return Path(trainer_checkpoint(args.resume_from, run_dir)[0])

    return check


def _next_start(run_dir: Path, args: Any, resumes_from: Path | None, *, resume: bool) -> tuple[Callable[[], str], str]:
    """Where the next `train` starts, should this one be stopped before its ranks say (asked only then), and the
    command that resumes it: --resume-from's checkpoint, the one the ranks will choose (a damaged newest
    checkpoint passed over), or under --trainer the Trainer's own newest checkpoint-<N>."""
    from backends.runner.status import TRAIN_COMMAND, next_start, where_next

    if args.trainer:
        from backends.runner.trainer import RESUME_COMMAND, newest_checkpoint
        from planner.rundir.previous_run import TRAINER_CHECKPOINTS

        if args.resume_from is not None and resumes_from is not None:
            return partial(where_next, str(resumes_from), RESUME_COMMAND), RESUME_COMMAND
        newest = partial(newest_checkpoint, run_dir / TRAINER_CHECKPOINTS)
        return (lambda: where_next(newest()[0] if resume else None, RESUME_COMMAND)), RESUME_COMMAND
    if args.resume_from is not None and resumes_from is not None:
        return partial(where_next, str(resumes_from)), TRAIN_COMMAND
    return partial(next_start, run_dir, tiny=args.tiny, resume=resume), TRAIN_COMMAND


def register(app: typer.Typer) -> None:
    @app.command("train", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def train_command(
        context: typer.Context,
        run_dir: Path = typer.Argument(..., help="Run folder written by `hardware-selector plan --emit DIR`."),
        nproc: int | None = typer.Option(None, "--nproc", min=1, help="Processes on this node (default: the plan's)."),
        max_restarts: int = typer.Option(
            0, "--max-restarts", min=0, help="Restart crashed ranks this often (the run resumes from its checkpoints)."
        ),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="Make every check a launch makes, then print the torchrun command instead."
        ),
    ) -> None:
        """Train a run folder on this machine: torchrun + the runner (python -m backends.run).

        Runner options (--data, --steps, --lr, --tiny, --strategy, --record, ...) are passed on.

        `python -m backends.run --help` lists every runner option (but --plan, which is RUN_DIR).

        Run options (--save-every, --keep-last, ...) hold for this run only; plan.json keeps its own."""
        forwarded = list(context.args)
        from .interrupts import exit_code_of, said_when_interrupted

        with said_when_interrupted(INTERRUPTED_BEFORE_LAUNCH):  # run_logged says its own once torchrun runs
            prepared = _prepare(run_dir, forwarded, nproc=nproc, max_restarts=max_restarts, dry_run=dry_run)
        if prepared is None:
            return
        spec, command, lock, record_stopped, held = prepared  # noqa: F841 (lock: held while torchrun runs)
        from .launcher_output import failure_line, interruption_line, log_path, rank_exit_code, run_logged

        log = log_path(spec.run_dir)
        started = time.time()
        # relative paths: the user's folder
        code, explained, stopped_by = run_logged(command, cwd=Path.cwd(), log=log, env=held)
        if code and stopped_by is not None:  # this process was stopped: the ranks' exits are its consequence
            message = record_stopped(stopped_by, started)
            interrupted = None if message is None else f"interrupted: {message}"
        else:  # torchrun or its ranks stopped by a signal that did not go through this process
            interrupted = interruption_line(spec.run_dir, started) if code else None
        if interrupted:  # Ctrl-C or a scheduler's SIGTERM: not a failure, and the log holds only torchrun's report
            print(interrupted, file=sys.stderr)
            raise typer.Exit(exit_code_of(interrupted))  # 130 SIGINT, 143 SIGTERM (interrupts.py)
        if code and not explained:
            print(failure_line(code, log), file=sys.stderr)
        if code:
            raise typer.Exit(rank_exit_code(code, log))
