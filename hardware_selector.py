"""hardware-selector: plan, check and run distributed training.

Run `hardware-selector --help` (or `python hardware_selector.py --help` from a
checkout). The Python API lives here too, so `from hardware_selector import ...`
works from both:

    from hardware_selector import HardwareSelector, get_distributed_training_config
    get_distributed_training_config("text_generation", "llama-7b", gpu_count=8, batch_size=16, max_memory_gb=24)

The seed tool's flags (`--model-family ... --model-name ...`) still work and
print its recommendation (hardware_selector_cli/seed_cli.py).
"""

from __future__ import annotations

import sys

from hardware_selector_cli.app import app  # noqa: F401  (re-exported)
from hardware_selector_cli.app import main as _subcommand_main
from hardware_selector_cli.seed_cli import is_seed_invocation
from hardware_selector_cli.seed_cli import run as _seed_main

# The Python API, imported on first use so that `--help` and other commands do not pay for it.
_API = ("HardwareSelector", "get_distributed_training_config", "get_inference_config", "select_hardware_for_task")
__all__ = ["app", "main", "training_arguments", *_API]


def __getattr__(name: str):
    if name in _API:
        from planner import selector

        return getattr(selector, name)
    raise AttributeError(f"module 'hardware_selector' has no attribute '{name}'")


def training_arguments(plan, output_dir, **overrides):
    """A transformers.TrainingArguments that runs `plan` (planner/emit/training_args.py)."""
    from planner.emit.training_args import training_arguments as build

    return build(plan, output_dir, **overrides)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: the seed tool's flags, or a subcommand."""
    args = sys.argv[1:] if argv is None else list(argv)
    if is_seed_invocation(args):
        return _seed_main(args)
    return _subcommand_main(args)


if __name__ == "__main__":
    sys.exit(main())
