"""`--keep-last N`: how many checkpoints a run keeps on disk, from the command line (docs/running.md, "Checkpoints").

`plan --emit DIR --keep-last N` writes N into plan.json's run block and engine.json's checkpoint block;
`train DIR --keep-last N` holds for that run only (as `train --save-every` does): its ranks keep the newest N
checkpoints and plan.json keeps the emitted value. The reference is the rule itself: of the checkpoints saved at
steps 1..S, the newest N stay (backends/checkpoint/layout.py commit). A bad count is one line, exit 2, and
neither a folder nor a launch.
"""

from __future__ import annotations

import json

import pytest

from backends.runner.options import load_checked_folder, parse_args
from backends.runner.trainer import checkpoint_arguments
from planner.contract.run_config import CheckpointPolicy
from planner.errors import UserInputError
from planner.rundir.run_overrides import RunOverrides
from planner.rundir.write import RunOptions, emit_run_folder
from tests.distributed import cli_in_process as cli
from tests.distributed import train_with_warm_ranks
from tests.emit_plans import make_plan

EMITTED = 3  # plan.json's count: neither the default (2) nor what `train` asks for (1)
PLAN = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "64", "--global-batch", "8"]
BAD = [("0", "--keep-last must be greater than or equal to 1, not 0"),
       ("-1", "--keep-last must be greater than or equal to 1, not -1"),
       ("two", "'--keep-last'"),
       ("1001", "--keep-last must be less than or equal to 1000, not 1001")]  # fmt: skip


def _one_line_error(completed, fragment: str) -> None:
    lines = completed.stderr.strip().splitlines()
    assert completed.returncode == 2, completed.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], lines


def _kept(run_dir):
    return sorted(path.name for path in (run_dir / "checkpoints").glob("global_step*"))


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    """An engine folder (the one strategy with an engine.json) emitted with --keep-last 3."""
    run_dir = tmp_path_factory.mktemp("keep") / "run"
    completed = cli(*PLAN, "--strategies", "engine", "--emit", run_dir, "--keep-last", EMITTED)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return run_dir


def test_plan_emit_writes_the_count_into_plan_json_and_engine_json(emitted):
    run = json.loads((emitted / "plan.json").read_text())["run"]
    engine = json.loads((emitted / "engine.json").read_text())
    assert run["checkpoint"]["keep_last"] == EMITTED
    assert engine["hardware_selector"]["checkpoint"]["keep_last"] == EMITTED


def test_the_python_api_takes_it_as_a_run_option_or_an_override(tmp_path):
    plan = make_plan("gpt2")
    emit_run_folder(plan, tmp_path / "options", options=RunOptions(checkpoint=CheckpointPolicy(keep_last=4)))
    emit_run_folder(plan, tmp_path / "overrides", overrides=RunOverrides(keep_last=5))
    for name, count in (("options", 4), ("overrides", 5)):
        assert json.loads((tmp_path / name / "plan.json").read_text())["run"]["checkpoint"]["keep_last"] == count


@pytest.mark.parametrize(("value", "fragment"), BAD)
def test_a_bad_count_at_emit_is_one_line_and_no_folder(tmp_path, value, fragment):
    run_dir = tmp_path / "run"
    _one_line_error(cli(*PLAN, "--emit", run_dir, "--keep-last", value), fragment)
    assert not run_dir.exists()


def test_keep_last_without_emit_is_refused():
    _one_line_error(cli(*PLAN, "--keep-last", "1"), "--keep-last describes the run of an emitted folder; add --emit")


@pytest.mark.parametrize(("value", "fragment"), BAD)
def test_a_bad_count_at_train_is_one_line_and_no_launch(emitted, value, fragment):
    fragment = "argument --keep-last: invalid int value: 'two'" if value == "two" else fragment
    before = sorted(path.name for path in emitted.iterdir())
    _one_line_error(cli("train", emitted, "--tiny", "--keep-last", value), fragment)
    assert sorted(path.name for path in emitted.iterdir()) == before  # no logs/, no checkpoints/


def test_the_runner_parses_the_count_and_the_trainer_door_gets_it_as_save_total_limit(emitted):
    assert parse_args(["--plan", "x", "--keep-last", "7"]).keep_last == 7
    assert parse_args(["--plan", "x"]).keep_last is None  # plan.json's, not a default of the parser
    with pytest.raises(UserInputError, match="argument --keep-last: invalid int value: 'two'"):
        parse_args(["--plan", "x", "--keep-last", "two"])
    limits = [
        checkpoint_arguments(load_checked_folder(parse_args(["--plan", str(emitted), "--tiny", *flags])).run)
        for flags in ([], ["--keep-last", "1"])
    ]
    assert [limit["save_total_limit"] for limit in limits] == [EMITTED, 1]


def test_train_keep_last_keeps_the_newest_checkpoints_for_that_run_only(emitted):
    """Three steps, a checkpoint at each: --keep-last 1 leaves the newest, where plan.json's 3 would leave all."""
    steps, keep = 3, 1
    completed = train_with_warm_ranks(emitted, "--tiny", "--steps", steps, "--save-every", 1, "--keep-last", keep)
    assert completed.returncode == 0, completed.stderr[-3000:]
    saved = [f"global_step{step}" for step in range(1, steps + 1)]
    assert _kept(emitted) == saved[-keep:] != saved[-EMITTED:]
    # The engine's state names the tag it is sealed under, not the .partial- folder it was written in (an audit).
    state = json.loads((emitted / "checkpoints" / saved[-1] / "engine_state.json").read_text())
    assert state["tag"] == saved[-1]
    assert json.loads((emitted / "plan.json").read_text())["run"]["checkpoint"]["keep_last"] == EMITTED
