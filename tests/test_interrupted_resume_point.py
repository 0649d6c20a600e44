"""Where an interrupted `train` says the next one resumes, when the newest checkpoint is damaged.

Found by an audit: with checkpoints/global_step2 damaged and global_step1 intact, a `train` stopped while its
ranks started said "no checkpoint was saved yet: `hardware-selector train` starts again at step 1" (its
runner_state.json truncated) or "resumes from .../global_step2" (a weights file truncated), while the ranks,
verifying each checkpoint's manifest, resume from global_step1. The line now comes from the ranks' own choice
(backends/runner/checkpoints.py, chosen_checkpoint); the reference here is that choice, made by
RunCheckpoints.newest exactly as a rank makes it. No torchrun: the launch is replaced by one that Ctrl-C ended
while the ranks were starting (before they recorded anything).
"""

from __future__ import annotations

import json
import signal

import pytest

from backends.checkpoint.save import begin_partial, seal
from backends.runner.checkpoints import RUNNER_STATE, RunCheckpoints, model_fingerprint
from hardware_selector_cli import launcher_output
from hardware_selector_cli.app import main
from planner.errors import UserInputError
from planner.rundir.plan_file import read_plan_file
from planner.rundir.replan import plan_digest
from tests.test_cli_interrupts import emit_folder


@pytest.fixture()
def run_dir(tmp_path, capsys):
    """A run folder with checkpoints at steps 1 and 2 of its own."""
    folder = emit_folder(tmp_path / "run", capsys)
    _, run = read_plan_file(folder)
    saved_under = {"model": run.model.name, "model_fingerprint": model_fingerprint(run.model.hf_config, tiny=True),
                   "run_dir": str(folder.resolve()), "plan_digest": plan_digest(folder), "strategy": "ddp"}  # fmt: skip
    for step in (1, 2):  # what the runner seals: the adapter's files and its state, under a manifest
        partial = begin_partial(folder / "checkpoints", f"global_step{step}")
        (partial / "model.pt").write_bytes(bytes(range(256)) * 64)
        (partial / RUNNER_STATE).write_text(json.dumps({"step": step, "saved_under": saved_under}))
        seal(folder / "checkpoints", partial, f"global_step{step}", keep_last=3)
    return folder


def _interrupted_start(*args, **kwargs):
    return 1, False, signal.SIGINT  # torchrun's exit once Ctrl-C reached it and the ranks before their loop


@pytest.mark.parametrize("damaged", ["model.pt", RUNNER_STATE])
def test_an_interrupted_train_names_the_checkpoint_the_ranks_will_resume_from(run_dir, capsys, monkeypatch, damaged):
    newest = run_dir / "checkpoints" / "global_step2"
    with open(newest / damaged, "r+b") as file:  # truncated: the manifest's size no longer matches
        file.truncate(10)
    chosen = RunCheckpoints(run_dir / "checkpoints", keep_last=3).newest(tiny=True)  # as rank 0 chooses
    capsys.readouterr()
    assert chosen == run_dir / "checkpoints" / "global_step1"

    monkeypatch.setattr(launcher_output, "run_logged", _interrupted_start)
    assert main(["train", str(run_dir), "--tiny"]) == 130
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith(("interrupted:", "error:"))]
    expected = f"SIGINT before the ranks began training; `hardware-selector train` resumes from {chosen}"
    assert said == [f"interrupted: {expected}"]
    assert json.loads((run_dir / "run_status.json").read_text())["message"] == expected


def test_with_no_intact_checkpoint_the_line_says_what_the_next_train_will(run_dir, capsys, monkeypatch):
    for step in (1, 2):
        with open(run_dir / "checkpoints" / f"global_step{step}" / "model.pt", "r+b") as file:
            file.truncate(10)
    with pytest.raises(UserInputError) as refused:  # the ranks' refusal, the reference
        RunCheckpoints(run_dir / "checkpoints", keep_last=3).newest(tiny=True)
    capsys.readouterr()
    monkeypatch.setattr(launcher_output, "run_logged", _interrupted_start)
    assert main(["train", str(run_dir), "--tiny"]) == 130
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith(("interrupted:", "error:"))]
    assert said == [f"interrupted: SIGINT before the ranks began training; {refused.value}"]
