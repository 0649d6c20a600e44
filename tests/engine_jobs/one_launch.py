"""Several test jobs in one torchrun launch: `python tests/engine_jobs/one_launch.py "JOB ARG ..." ["JOB ARG ..." ...]`.

A launch costs torchrun ~2 s and every rank ~4 s of CPU (torch, transformers, the process group) however little
its job does, so a test file's jobs of one world size run one after another in a single launch: JOB is a module
of tests/engine_jobs/ whose main(argv) takes the arguments its own command line would (`python
tests/engine_jobs/JOB.py ARG ...` runs the same job alone). The first job starts the process group and the
later ones find it started (common.start_group). A job that fails ends the launch, its traceback headed by its
command line: the peers of a rank that went on would wait for it in a collective.
"""

from __future__ import annotations

import importlib
import shlex
import sys
from pathlib import Path


def launch_jobs(root: Path, world: int, jobs: dict[str, tuple[object, ...]], *, timeout: float) -> Path:
    """From a test: each job NAME: (MODULE, ARG ...) run as `MODULE root/NAME/out ARG ...`, in the order given, in one
    launch of `world` ranks; root, where each job's outputs are."""
    from tests.distributed import run_torchrun

    commands = []
    for name, (module, *args) in jobs.items():
        (root / name).mkdir(exist_ok=True)
        commands.append(shlex.join([str(module), str(root / name / "out"), *map(str, args)]))
    run_torchrun(["tests/engine_jobs/one_launch.py", *commands], nproc=world, timeout=timeout)
    return root


def main(jobs: list[str]) -> None:
    for job in jobs:
        name, *argv = shlex.split(job)
        try:
            importlib.import_module(f"tests.engine_jobs.{name}").main(argv)
        except Exception as error:
            raise RuntimeError(f"the job `{job}` failed") from error


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main(sys.argv[1:])
    exit_worker(0)  # gloo's threads can abort interpreter teardown after a run that succeeded
