"""The runner's command line: `python -m backends.run --plan DIR [options]` (docs/running.md).

The options that change the run itself (data, weights, length, learning
rate, checkpoints) become a RunOverrides of the contract, validated like the
emitter's; the others say how to run it (strategy, smoke test, recording).
`hardware-selector train` forwards the same options.
"""

from __future__ import annotations

import argparse
from pathlib import Path

STRATEGIES = ("engine", "ddp", "fsdp", "deepspeed")
OVERRIDE_KEYS = (
    "data",
    "eval_data",
    "text_field",
    "text_unit",
    "eval_fraction",
    "eval_every",
    "tokenizer",
    "init",
    "steps",
    "epochs",
    "learning_rate",
    "warmup_steps",
    "seed",
    "save_every",
    "export_every",
    "on_non_finite",
    "on_loss_spike",
    "on_grad_spike",
)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options that change the run (shared by the runner and `hardware-selector train`)."""
    parser.add_argument(
        "--data",
        nargs="+",
        metavar="PATH",
        help="training text: .txt/.jsonl/.parquet files, globs, "
        "or a datasets.save_to_disk folder (default: the plan's)",
    )
    parser.add_argument("--eval-data", nargs="+", metavar="PATH", help="a separate evaluation set")
    parser.add_argument("--text-field", help="the field holding the text in .jsonl/.parquet rows (default: text)")
    parser.add_argument(
        "--text-unit",
        choices=("line", "paragraph", "document"),
        help="what one document of a .txt file is (default: paragraph)",
    )
    parser.add_argument("--eval-fraction", type=float, help="share of the blocks held out for evaluation (0.01)")
    parser.add_argument("--eval-every", type=int, help="evaluate every N steps (0: at the end only)")
    parser.add_argument("--tokenizer", help="folder of the tokenizer (default: the model folder's)")
    parser.add_argument(
        "--init",
        choices=("pretrained", "random"),
        help="start from the model folder's weights "
        "or from scratch (default: pretrained when the folder holds weights)",
    )
    parser.add_argument("--steps", type=int, help="train for this many optimizer steps (default: the plan's epochs)")
    parser.add_argument("--epochs", type=float, help="train for this many passes over the data")
    parser.add_argument("--lr", dest="learning_rate", type=float, help="peak learning rate")
    parser.add_argument("--warmup-steps", type=int, help="linear warmup steps")
    parser.add_argument("--seed", type=int, help="seed of the data order and the initialisation")
    parser.add_argument("--save-every", type=int, help="checkpoint every N steps (0: only when stopping early)")
    parser.add_argument("--export-every", type=int, help="also write final/ at every N-th step")
    parser.add_argument(
        "--on-non-finite",
        choices=("warn", "skip-step", "stop"),
        help="a NaN/Inf loss or gradient norm (default: stop, after checkpointing)",
    )
    parser.add_argument(
        "--on-loss-spike",
        metavar="ACTION[:FACTOR]",
        help="a loss above FACTOR x its moving average: warn|skip-step|stop (default warn:3)",
    )
    parser.add_argument(
        "--on-grad-spike",
        metavar="ACTION[:FACTOR]",
        help="a gradient norm above FACTOR x its moving average (default warn:10)",
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m backends.run", description="Train a run folder written by `hardware-selector plan --emit`."
    )
    parser.add_argument("--plan", required=True, type=Path, help="the run folder")
    add_run_options(parser)
    parser.add_argument("--strategy", choices=STRATEGIES, help="run the plan's model and batch with another strategy")
    parser.add_argument(
        "--trainer",
        action="store_true",
        help="train through transformers.Trainer (DDP, FSDP or DeepSpeed plans) instead of the runner's own loop",
    )
    parser.add_argument("--tiny", action="store_true", help="smoke test: the same architecture shrunk, random weights")
    parser.add_argument("--no-resume", action="store_true", help="ignore the folder's checkpoints (they are kept)")
    parser.add_argument(
        "--record",
        action="store_true",
        help="store the measured step time and memory, beside the "
        "prediction, in the benchmark database (calibrates later plans)",
    )
    parser.add_argument("--db", type=Path, help="benchmark database for --record (default: $HARDWARE_SELECTOR_DB)")
    parser.add_argument("--metrics", type=Path, help="metrics file (default: RUN_DIR/metrics.jsonl)")
    # The DeepSpeed launcher passes --local_rank; the rank comes from the environment anyway.
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def override_values(args: argparse.Namespace) -> dict:
    values = {key: getattr(args, key) for key in OVERRIDE_KEYS}
    if args.no_resume:
        values["resume"] = False
    return values
