"""Relative paths given to the runner are the caller's: launch.sh and slurm.sbatch start their launcher in the run
folder (mpiexec reads ./mpi_hostfile there), so they pass the folder they were run from (`--launch-dir`, an
argument: every launcher forwards the ranks' arguments to every node, where DeepSpeed's pdsh and Open MPI drop
most of the environment) and the runner works from there (docs/running.md, "Launchers"). A node where that
folder does not exist stays in the run folder, as every rank did before it was passed.
"""

from __future__ import annotations

import os
from pathlib import Path


def enter_launch_dir(launch_dir: Path | None) -> None:
    """Work from the folder the launch script was run in, where it exists on this node."""
    if launch_dir is not None and launch_dir.is_dir():
        os.chdir(launch_dir)
