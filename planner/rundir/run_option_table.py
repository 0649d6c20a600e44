"""The one table of run options: the flags that change a run (data, weights, length, learning rate, ...).

Each row names a RunOverrides field (planner/rundir/run_overrides.py), its flag, its type and its help. The
table is rendered twice and declared nowhere else: as argparse options for `python -m backends.run` and
`hardware-selector train` (backends/runner/options.py), and as typer options for `plan --emit`
(hardware_selector_cli/run_options.py, the rows with `at_emit`). Whichever door a value comes in by, it
reaches the run config the same way: as a RunOverrides applied to the run's RunConfig (docs/running.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunOption:
    key: str  # the RunOverrides field it sets
    flag: str
    kind: type  # str, int or float
    help: str
    many: bool = False  # one or more values (argparse: --data a b; typer: --data a --data b)
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    at_emit: bool = True  # `plan --emit` takes it too (else only `train` and the runner)


RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption(
        "data",
        "--data",
        str,
        "training text: .txt/.jsonl/.parquet files, globs, or a datasets.save_to_disk folder (default: the plan's)",
        many=True,
        metavar="PATH",
    ),
    RunOption("eval_data", "--eval-data", str, "a separate evaluation set", many=True, metavar="PATH"),
    RunOption("text_field", "--text-field", str, "the field holding the text in .jsonl/.parquet rows (default: text)"),
    RunOption(
        "text_unit",
        "--text-unit",
        str,
        "what one document of a .txt file is (default: paragraph)",
        choices=("line", "paragraph", "document"),
    ),
    RunOption("tokenizer", "--tokenizer", str, "folder of the tokenizer (default: the model folder's)"),
    RunOption(
        "init",
        "--init",
        str,
        "start from the model folder's weights or from scratch (default: pretrained when the folder holds weights)",
        choices=("pretrained", "random"),
    ),
    RunOption("eval_fraction", "--eval-fraction", float, "share of the blocks held out for evaluation (0.01)"),
    RunOption("eval_every", "--eval-every", int, "evaluate every N steps (0: at the end only)"),
    RunOption("steps", "--steps", int, "train for this many optimizer steps (default: one epoch)"),
    RunOption("epochs", "--epochs", float, "train for this many passes over the data (1)"),
    RunOption("learning_rate", "--lr", float, "peak learning rate (3e-4)"),
    RunOption("warmup_steps", "--warmup-steps", int, "linear warmup steps (5% of the run)"),
    RunOption("seed", "--seed", int, "seed of the data order and the initialisation", at_emit=False),
    RunOption("save_every", "--save-every", int, "checkpoint every N steps (1000; 0: only on a stop signal or rule)"),
    RunOption(
        "keep_last",
        "--keep-last",
        int,
        "keep only the newest N checkpoints on disk, 1 to 1000 (2); at train: for that run only, plan.json keeps "
        "its own",
        metavar="N",
    ),
    RunOption("export_every", "--export-every", int, "also write final/ at every N-th step"),
    RunOption(
        "on_non_finite",
        "--on-non-finite",
        str,
        "a NaN/Inf loss or gradient norm (default: stop, after checkpointing)",
        choices=("warn", "skip-step", "stop"),
        at_emit=False,
    ),
    RunOption(
        "on_loss_spike",
        "--on-loss-spike",
        str,
        "a loss above FACTOR x its moving average: warn|skip-step|stop (default warn:3)",
        metavar="ACTION[:FACTOR]",
        at_emit=False,
    ),
    RunOption(
        "on_grad_spike",
        "--on-grad-spike",
        str,
        "a gradient norm above FACTOR x its moving average (default warn:10)",
        metavar="ACTION[:FACTOR]",
        at_emit=False,
    ),
)


def given_flags(values: dict[str, object]) -> list[str]:
    """The flags of the table whose value was given (not None), in the table's order."""
    return [option.flag for option in RUN_OPTIONS if values.get(option.key) is not None]


# The RunConfig field each row's option sets (by its key; '|' between two it sets alike, as --seed does): a value
# out of that field's range is said in the words of the flag the user typed (`--steps`, not `optim.max_steps`;
# planner/rundir/run_overrides.py).
SETS = {
    "data": "data.train", "eval_data": "data.eval", "text_field": "data.text_field", "text_unit": "data.text_unit",
    "tokenizer": "model.tokenizer", "init": "model.init", "eval_fraction": "data.eval_fraction",
    "eval_every": "data.eval_every", "steps": "optim.max_steps", "epochs": "optim.epochs",
    "learning_rate": "optim.learning_rate", "warmup_steps": "optim.warmup_steps", "seed": "data.seed|optim.seed",
    "save_every": "checkpoint.every", "keep_last": "checkpoint.keep_last", "export_every": "checkpoint.export_every", "on_non_finite": "anomaly.non_finite",
    "on_loss_spike": "anomaly.loss_spike", "on_grad_spike": "anomaly.grad_norm_spike",
}  # fmt: skip
