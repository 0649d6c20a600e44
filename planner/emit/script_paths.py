"""Where launch.sh and slurm.sbatch find the run folder and the Python interpreter when they run, so that a folder
planned on one machine (a laptop) runs on another (a cluster) wherever it is copied.

The interpreter is PYTHON when set, else the one that planned the folder if this machine has it at the same
path (planned on the cluster itself), else `python` on PATH: the running machine needs hardware-selector
installed there (the folder's README says so). A name that is not there is one line and exit code 2.

launch.sh finds its folder from its own path. sbatch does not run the submitted file: SLURM runs a copy from
its spool directory, so slurm.sbatch looks, unless RUN_DIR is set, beside the path SLURM records as the job's
command (`scontrol show job`, the script as submitted) and then in the submit directory (SLURM_SUBMIT_DIR), and
takes the first that holds plan.json.
"""

from __future__ import annotations

import shlex
import sys


def python_lines(script: str, python: str | None = None) -> list[str]:
    """Set PYTHON; `python`: the planning interpreter (default: this one)."""
    return [
        "# The interpreter: PYTHON, else the one that planned this folder when this machine has it, else python on",
        '# PATH. Another machine needs hardware-selector installed in it (README.md, "On another machine").',
        f"PLANNED_PYTHON={shlex.quote(python or sys.executable)}",
        'if [[ -z "${PYTHON:-}" ]]; then',
        '  if [[ -x "$PLANNED_PYTHON" ]]; then PYTHON="$PLANNED_PYTHON"; else PYTHON=python; fi',
        "fi",
        'if ! command -v -- "$PYTHON" >/dev/null; then',
        f"  echo \"{script}: no Python interpreter '$PYTHON' on this machine; set PYTHON=/path/to/python, one with\" \\",
        '    "hardware-selector installed" >&2',
        "  exit 2",
        "fi",
    ]


def sbatch_run_dir_lines() -> list[str]:
    """Set and export RUN_DIR in slurm.sbatch."""
    return [
        "# The run folder: RUN_DIR, else where this script was submitted from. SLURM runs a copy of it from its",
        "# spool directory, so beside $0 is tried first (bash slurm.sbatch), then beside the submitted path that",
        "# SLURM records as the job's Command, then the submit directory.",
        'if [[ -z "${RUN_DIR:-}" ]]; then',
        '  SUBMITTED="$(scontrol show job "${SLURM_JOB_ID:-}" 2>/dev/null | sed -n \'s/^ *Command=//p\' | head -n1 || true)"',
        '  for RUN_DIR in "$(dirname -- "$0")" "$(dirname -- "${SUBMITTED:-.}")" "${SLURM_SUBMIT_DIR:-.}"; do',
        '    if [[ -f "$RUN_DIR/plan.json" ]]; then break; fi',
        "  done",
        "fi",
        'if [[ ! -f "$RUN_DIR/plan.json" ]]; then',
        '  echo "slurm.sbatch: no run folder (plan.json) at $RUN_DIR; submit from the folder (cd RUN_DIR && sbatch" \\',
        '    "slurm.sbatch) or set RUN_DIR=/path/to/the/folder" >&2',
        "  exit 2",
        "fi",
        'RUN_DIR="$(cd -- "$RUN_DIR" && pwd -P)"',
        "export RUN_DIR",
    ]
