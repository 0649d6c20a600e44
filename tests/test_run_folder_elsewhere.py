"""A run folder planned on one machine runs on another: launch.sh and slurm.sbatch find the folder and the
interpreter when they run (planner/emit/script_paths.py).

slurm.sbatch hard-coded the planning machine's folder and venv (`export RUN_DIR=/tmp/...`, `export
PYTHON=/.../.venv/bin/python`), and launch.sh defaulted to that venv. Here the folder is emitted as if on a
laptop (an interpreter path this machine does not have), moved, and its scripts are run with bash, the SLURM
tools and `python` stubbed on PATH (tests/test_emit_scripts.py's recorder).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from emit_plans import make_plan

from planner.rundir.write import emit_run_folder
from tests.test_emit_scripts import FAKE_SLURM, RECORDER

LAPTOP_PYTHON = "/Users/someone/project/.venv/bin/python"  # the planning machine's; not on this one


@pytest.fixture()
def moved(tmp_path, monkeypatch) -> Path:
    """A two-node folder planned with LAPTOP_PYTHON at tmp/planned/run, then moved to tmp/cluster/my run."""
    monkeypatch.setattr(sys, "executable", LAPTOP_PYTHON)
    planned = tmp_path / "planned" / "run"
    emit_run_folder(make_plan(strategy="ddp", nodes=2), planned)
    target = tmp_path / "cluster" / "my run"
    target.parent.mkdir()
    shutil.move(str(planned), str(target))
    return target


def _tools(tmp_path: Path, with_python: bool = True) -> Path:
    """A bin folder: `python` (the recorder), and SLURM's scontrol (with `show job` giving $SUBMITTED_SCRIPT as the
    job's Command), srun and hostname."""
    tools = tmp_path / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    bodies = dict(FAKE_SLURM)
    bodies["scontrol"] = (
        'if [[ "$1" == show && "$2" == job ]]; then\n'
        '  [[ -n "${SUBMITTED_SCRIPT:-}" ]] && printf "   UserId=me\\n   Command=%s\\n" "$SUBMITTED_SCRIPT"; exit 0\n'
        "fi\n" + FAKE_SLURM["scontrol"]
    )
    scripts = {name: "#!/bin/bash\n" + body for name, body in bodies.items()}
    if with_python:
        scripts["python"] = RECORDER
    for name, text in scripts.items():
        (tools / name).write_text(text)
        (tools / name).chmod(0o755)
    return tools


def _run(script: Path, tools: Path, cwd: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str] | None]:
    record = tools.parent / "argv"
    record.unlink(missing_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in ("PYTHON", "RUN_DIR")}
    path = f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin"  # no other python
    environment = {**base, "PATH": path, "RECORD_FILE": str(record), "SLURM_JOB_ID": "7", **env}
    environment.setdefault("SLURM_JOB_NODELIST", "node-[a-b]")
    environment.setdefault("SLURM_JOB_NUM_NODES", "2")
    done = subprocess.run(["bash", str(script)], cwd=cwd, env=environment, capture_output=True, text=True, timeout=60)
    return done, record.read_bytes().decode().split("\0")[:-1] if record.exists() else None


def test_launch_sh_runs_where_it_is_copied_with_python_on_path(tmp_path, moved):
    assert "/planned/" not in (moved / "launch.sh").read_text()
    done, argv = _run(moved / "launch.sh", _tools(tmp_path), tmp_path, NNODES="1")
    assert done.returncode == 0 and argv is not None, done.stderr
    assert argv[argv.index("--plan") + 1] == str(moved.resolve())
    # No interpreter there: one line naming PYTHON, not bash's "No such file or directory" (exit 127).
    bare = _tools(tmp_path / "bare", with_python=False)
    done, argv = _run(moved / "launch.sh", bare, tmp_path, NNODES="1")
    assert (done.returncode, argv) == (2, None)
    assert done.stderr == (
        "launch.sh: no Python interpreter 'python' on this machine; set PYTHON=/path/to/python, one with "
        "hardware-selector installed\n"
    )


def test_slurm_sbatch_finds_the_folder_it_was_submitted_from(tmp_path, moved):
    """SLURM runs a copy of the script from its spool directory: the folder is found beside the submitted path
    (the job's Command), or in the submit directory, or from RUN_DIR; the interpreter is python on PATH."""
    text = (moved / "slurm.sbatch").read_text()
    assert "/planned/" not in text and "export RUN_DIR=/" not in text
    spool = tmp_path / "spool" / "job7"
    spool.mkdir(parents=True)
    copy = spool / "slurm_script"
    shutil.copy(moved / "slurm.sbatch", copy)
    tools = _tools(tmp_path)
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    runs = {
        "submitted by path from elsewhere": {"SUBMITTED_SCRIPT": str(moved / "slurm.sbatch")},
        "submitted by a relative path": {"SUBMITTED_SCRIPT": "../cluster/my run/slurm.sbatch"},
        "submitted from the folder": {"SLURM_SUBMIT_DIR": str(moved)},
        "RUN_DIR given": {"RUN_DIR": str(moved)},
    }
    for case, env in runs.items():
        cwd = moved if "SLURM_SUBMIT_DIR" in env else elsewhere
        done, argv = _run(copy, tools, cwd, **{"SLURM_SUBMIT_DIR": str(cwd), **env})
        assert done.returncode == 0 and argv is not None, (case, done.stderr)
        assert argv[:2] == ["-m", "torch.distributed.run"] and argv[argv.index("--plan") + 1] == str(moved.resolve())
    done, argv = _run(copy, tools, elsewhere, SLURM_SUBMIT_DIR=str(elsewhere))
    assert (done.returncode, argv) == (2, None)
    assert done.stderr == (
        f"slurm.sbatch: no run folder (plan.json) at {elsewhere}; submit from the folder (cd RUN_DIR && sbatch "
        "slurm.sbatch) or set RUN_DIR=/path/to/the/folder\n"
    )
    # PYTHON given wins over python on PATH.
    done, argv = _run(copy, _tools(tmp_path / "bare", with_python=False), moved, SLURM_SUBMIT_DIR=str(moved))
    assert done.returncode == 2 and "no Python interpreter 'python'" in done.stderr
    done, argv = _run(copy, tools, moved, SLURM_SUBMIT_DIR=str(moved), PYTHON=str(tools / "python"))
    assert done.returncode == 0 and argv is not None


def test_the_readme_says_what_another_machine_needs(moved):
    readme = (moved / "README.md").read_text()
    assert "## On another machine" in readme and "hardware-selector installed" in readme
