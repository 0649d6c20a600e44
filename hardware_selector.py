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

import importlib.util
import os
import sys

from hardware_selector_cli.collector import collecting_less
from planner.errors import known_keywords

# `hardware_selector.integrations` is backends/integrations (framework doors), under this name too.
__path__: list[str] = []  # a package without files of its own: the finder below supplies its one subpackage


class _IntegrationsAlias:
    """Imports hardware_selector.integrations[.x] as the one module backends.integrations[.x] (no copy).

    A meta path finder and loader by its methods (find_spec; create_module, exec_module): importlib.abc's base
    classes would import importlib.resources and tempfile, ~5 ms of `--help`."""

    PREFIX = "hardware_selector.integrations"

    def find_spec(self, name, path=None, target=None):
        if name == self.PREFIX or name.startswith(self.PREFIX + "."):
            return importlib.util.spec_from_loader(name, self)
        return None

    RENAMED = {".lightning": ".lightning_strategy"}  # our file must not shadow the `lightning` library

    def create_module(self, spec):
        rest = spec.name[len(self.PREFIX) :]
        return importlib.import_module("backends.integrations" + self.RENAMED.get(rest, rest))

    def exec_module(self, module):
        return None  # already executed under its own name


if not any(isinstance(finder, _IntegrationsAlias) for finder in sys.meta_path):
    sys.meta_path.append(_IntegrationsAlias())

# The Python API, imported on first use so that `--help` and other commands do not pay for it; the Typer app
# likewise, so that main builds it with the collector set for start-up (hardware_selector_cli/collector.py).
_API = ("HardwareSelector", "get_distributed_training_config", "get_inference_config", "select_hardware_for_task")
_CLI_APP = "app"
__all__ = [_CLI_APP, "main", "emit_run_folder", "training_arguments", *_API]


def __getattr__(name: str):
    if name == _CLI_APP:
        from hardware_selector_cli.app import app

        return app
    if name == "integrations":
        return importlib.import_module("hardware_selector.integrations")
    if name in _API:
        from benchmarks_db.calibrate import plan_calibration
        from planner import selector
        from planner.selector.calibration import install_calibration_source

        # Its answers calibrate on the benchmark database as `plan` does (planner/selector/calibration.py).
        install_calibration_source(plan_calibration)
        if name == "HardwareSelector":  # its training_arguments, as the module's function
            _install_cpu_state_setup()
        return getattr(selector, name)
    raise AttributeError(f"module 'hardware_selector' has no attribute '{name}'")


@known_keywords
def emit_run_folder(plan, directory, *, force=False, nproc_override=None, options=None, launcher=None, image=None):
    """Write `plan`'s run folder into `directory`, as `hardware-selector plan ... --emit DIR` does; returns the
    written paths (planner/rundir/write.py). `plan`: a Plan, a plan.json or a run folder (whose run, its data and
    hyperparameters, is kept unless `options` replaces it); options: a planner.rundir.run_options.RunOptions;
    launcher and image: as --launcher torchrun|slurm|k8s|skypilot|mpi and --image, docs/running.md "Launchers"."""
    from planner.launch_target import launch_target
    from planner.rundir.plan_file import plan_and_run
    from planner.rundir.run_options import RunOptions
    from planner.rundir.write import emit_run_folder as write
    from planner.selector.arguments import flag

    force = flag("force", force)  # "no" is true to Python: it would overwrite the folder
    from_file = isinstance(plan, (str, os.PathLike))
    plan, run = plan_and_run(os.fspath(plan) if from_file else plan)
    if from_file and options is None:  # the folder's own run: its data, hyperparameters and policies
        options = RunOptions.of_run(run)
    launch = launch_target(launcher, image)
    return write(plan, directory, force=force, nproc_override=nproc_override, options=options, launch=launch)


def training_arguments(plan, output_dir, **overrides):
    """A transformers.TrainingArguments that runs `plan`: a Plan, a plan.json or a run folder
    (planner/rundir/training_arguments.py). A CPU plan's FSDP or DeepSpeed runs on CPU processes over gloo
    (backends/cpu_distributed.py), as `hardware-selector train` runs it, when a launcher started this process."""
    from planner.rundir.training_arguments import training_arguments as build

    _install_cpu_state_setup()
    return build(plan, output_dir, **overrides)


def _install_cpu_state_setup() -> None:
    """HardwareSelector.training_arguments and the function above set up a CPU plan's accelerate state alike."""
    from backends.cpu_distributed import configure_launched_cpu_state
    from planner.rundir.training_arguments import install_cpu_state_setup

    install_cpu_state_setup(configure_launched_cpu_state)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: the seed tool's flags, or a subcommand."""
    args = sys.argv[1:] if argv is None else list(argv)
    with collecting_less():  # from the first CLI import on (hardware_selector_cli/collector.py)
        return _run(args)


def _run(args: list[str]) -> int:
    from hardware_selector_cli.app import main as subcommand_main
    from hardware_selector_cli.seed_cli import is_seed_invocation
    from hardware_selector_cli.seed_cli import run as seed_main

    try:
        if is_seed_invocation(args):
            return seed_main(args)
        code = subcommand_main(args)
        if args in (
            ["--help"],
            ["-h"],
        ):  # the program's help covers both of its interfaces: the commands, then the seed flags
            from hardware_selector_cli.seed_cli import seed_help

            print(seed_help())
        return code
    except BrokenPipeError:  # `... | head`: the reader left; end quietly, as a tool killed by SIGPIPE does
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush must not raise again
        return 128 + 13


if __name__ == "__main__":
    sys.exit(main())
