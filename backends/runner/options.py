"""The runner's command line: `python -m backends.run --plan DIR [options]` (docs/running.md).

The options that change the run itself (data, weights, length, learning
rate, checkpoints) become a RunOverrides of the contract, validated like the
emitter's; the others say how to run it (strategy, smoke test, recording).
`hardware-selector train` forwards the same options.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from planner.contract.choices import Strategy
from planner.errors import UserInputError
from planner.rundir.run_option_table import RUN_OPTIONS

if TYPE_CHECKING:
    from backends.runner.folder import RunSpec

RECORD_ENV_VAR = "HARDWARE_SELECTOR_RECORD"  # 0: runs do not record themselves (a CI job, a test suite)
STRATEGIES = tuple(strategy.value for strategy in Strategy)  # planner/contract/choices.py
OVERRIDE_KEYS = tuple(option.key for option in RUN_OPTIONS)
RUNNER_PROG = "python -m backends.run"


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options that change the run: planner/rundir/run_option_table.py's rows, as argparse options."""
    for option in RUN_OPTIONS:
        kwargs: dict = {"help": option.help.replace("%", "%%"), "dest": option.key}  # argparse %-formats help
        if option.many:
            kwargs["nargs"] = "+"
        if option.kind is not str:
            kwargs["type"] = option.kind
        if option.choices:
            kwargs["choices"] = option.choices
        if option.metavar:
            kwargs["metavar"] = option.metavar
        parser.add_argument(option.flag, **kwargs)


class OneLineParser(argparse.ArgumentParser):
    """An unknown option or a value of the wrong type is one UserInputError in the words of the door the user
    called (`hardware-selector train` or `python -m backends.run`), not argparse's usage text."""

    def error(self, message: str) -> NoReturn:
        # `train --help` lists train's own options (--nproc, ...); the ones parsed here are the runner's, which
        # train passes on, and the runner's help is where they are listed.
        passed_on = "" if self.prog == RUNNER_PROG else f" (the runner's options, which {self.prog} passes on)"
        raise UserInputError(f"{self.prog}: {message}; see {RUNNER_PROG} --help{passed_on}")


def parse_args(argv: list[str] | None, *, prog: str = RUNNER_PROG) -> argparse.Namespace:
    args = runner_parser(prog).parse_args(argv)
    check_flags(args)
    return args


def runner_parser(prog: str = RUNNER_PROG) -> OneLineParser:
    """The runner's options (`train` passes them on; hardware_selector_cli/option_owners.py lists them)."""
    parser = OneLineParser(prog=prog, description="Train a run folder written by `hardware-selector plan --emit`.")
    parser.add_argument("--plan", required=True, type=Path, help="the run folder")
    add_run_options(parser)
    parser.add_argument("--strategy", choices=STRATEGIES, help="run the plan's model and batch with another strategy")
    parser.add_argument(
        "--trainer",
        action="store_true",
        help="train through transformers.Trainer (DDP, FSDP or DeepSpeed plans) instead of the runner's own loop",
    )
    parser.add_argument("--tiny", action="store_true", help="smoke test: the same architecture shrunk, random weights")
    parser.add_argument(
        "--synthetic",
        action="store_true",
        help="train on random tokens, not text (a demo or a timing run): a run from a checkpoint's weights "
        "otherwise refuses to start without --data",
    )
    parser.add_argument("--no-resume", action="store_true", help="ignore the folder's checkpoints (they are kept)")
    parser.add_argument(
        "--reset-data-position",
        action="store_true",
        help="resume a checkpoint saved on other data (another --data): keep its weights and optimizer, read this "
        "run's data from its start (without it, such a resume is refused)",
    )
    parser.add_argument(
        "--resume-from",
        type=Path,
        help="resume this checkpoint (a checkpoints/global_step<N> folder, this run's or another run folder's; "
        "under --trainer a checkpoints-trainer/checkpoint-<N> folder)",
    )
    parser.add_argument(
        "--record",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get(RECORD_ENV_VAR, "1") != "0",
        help="store the measured step time and memory, beside the prediction, in the benchmark database, which "
        f"calibrates later plans on this hardware (the default; --no-record, or {RECORD_ENV_VAR}=0 for every "
        "run of a shell or CI job, does not; a --tiny run never is)",
    )
    parser.add_argument("--db", type=Path, help="benchmark database for --record (default: $HARDWARE_SELECTOR_DB)")
    parser.add_argument("--metrics", type=Path, help="metrics file (default: RUN_DIR/metrics.jsonl)")
    parser.add_argument(
        "--steps-only",
        action="store_true",
        help="train and time the steps, nothing else: no evaluation, checkpoint or final/ export (a tune's trials)",
    )
    parser.add_argument(
        "--memory-limit-gb",
        type=_positive_gb,
        metavar="GB",
        help="stop as out of memory when a rank's peak passes this many GB (CUDA allocated, or resident on a CPU)",
    )
    parser.add_argument(
        "--launch-dir",
        type=Path,
        help="read relative paths (--data, --resume-from, --db, ...) from this folder; launch.sh and slurm.sbatch "
        "pass the one they were run from, since their launcher starts the ranks in the run folder",
    )
    # The DeepSpeed launcher passes --local_rank; the rank comes from the environment anyway.
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    return parser


def check_flags(args: argparse.Namespace) -> None:
    """Two flags of which one would be dropped without a word are one line (docs/running.md)."""
    if args.no_resume and args.resume_from is not None:
        raise UserInputError("--resume-from resumes a checkpoint and --no-resume starts afresh; drop one of them")
    if args.reset_data_position and (args.no_resume or args.trainer):
        other = "--no-resume starts afresh" if args.no_resume else "--trainer resumes through the Trainer's own state"
        raise UserInputError(f"--reset-data-position is for the runner's resume of a checkpoint, and {other}; drop one "
                             "of them")  # fmt: skip
    if args.trainer and args.strategy == Strategy.ENGINE.value:
        raise UserInputError("--trainer runs DDP, FSDP or DeepSpeed; the engine trains in the runner's own loop: "
                             "drop --trainer or pick another --strategy")  # fmt: skip
    if args.steps_only:  # a trial: no evaluation, checkpoint or export (--save-every 0 and --export-every 0 agree)
        dropped = [flag for key, flag in (("eval_data", "--eval-data"), ("eval_fraction", "--eval-fraction"),
                   ("eval_every", "--eval-every"), ("save_every", "--save-every"), ("export_every", "--export-every"))
                   if getattr(args, key) not in (None, 0)]  # fmt: skip
        if dropped:
            raise UserInputError(
                f"{', '.join(dropped)}: --steps-only trains and times the steps with no evaluation, checkpoint or "
                "export; drop one side"
            )
    if args.synthetic and (args.data or args.eval_data):
        raise UserInputError("--synthetic trains on random tokens and --data/--eval-data name text; drop one side")
    if args.db is not None and (not args.record or args.tiny):
        why = "--tiny runs record nothing" if args.tiny else f"this run does not record (--no-record, {RECORD_ENV_VAR})"
        raise UserInputError(f"--db names the database a run records into, and {why}; drop --db")


def _positive_gb(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of GB: {text!r}") from None
    if not 0 < value < 1e6:
        raise argparse.ArgumentTypeError(f"a memory limit is more than 0 GB, not {text}")
    return value


def override_values(args: argparse.Namespace) -> dict:
    values = {key: getattr(args, key) for key in OVERRIDE_KEYS}
    if args.no_resume:
        values["resume"] = False
    if args.synthetic:  # the folder's own data set aside, as `tune --synthetic` does
        values["data"] = values["eval_data"] = []
    return values


def load_checked_folder(args: argparse.Namespace) -> RunSpec:
    """The run folder with these options applied (backends/runner/folder.py), refused in one line when it
    would fine-tune a checkpoint on random tokens without being asked to (no --data, no --synthetic)."""
    from backends.runner.folder import load_run_folder
    from planner.rundir.run_overrides import overrides_from

    spec = load_run_folder(args.plan, overrides_from(override_values(args)), args.strategy)
    run = spec.run
    if run.data.synthetic and run.model.init == "pretrained" and not (args.tiny or args.synthetic or args.steps_only):
        raise UserInputError(
            f"{args.plan} trains from {run.model.path}'s weights but names no data, so it would train on random "
            "tokens: pass --data PATH (.txt, .jsonl or .parquet files), or --synthetic to train on random tokens "
            "on purpose (a demo), or --tiny for a smoke test"
        )
    return spec
