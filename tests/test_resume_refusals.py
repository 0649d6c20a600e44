"""Resuming a trained folder through `train` and the ranks: what is refused in one line (a checkpoint copied
in from another run folder, one already past --steps, one on other data) and what resumes (--resume-from as
docs/running.md writes it, a --tiny run's checkpoint on real data).

The trained folder is tests/trained_run.py's (2 steps on 2 ranks, checkpoints at 1 and 2), shared with
tests/test_runner_bad_input.py, whose emit and one-line check these tests use; each test works on a copy.
The runs that resume pass every check of `train` and then train with its ranks forked warm
(tests.distributed.train_with_warm_ranks): the resume is the subject, not `train`'s launch.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.distributed import REPO_ROOT, cpu_env, train_with_warm_ranks
from tests.distributed import cli_in_process as cli
from tests.test_runner_bad_input import emit, one_line_error
from tests.trained_run import shared_trained_run
from tests.warm_process import run_python

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    return shared_trained_run(tmp_path_factory)


@pytest.fixture(scope="module")
def user(tmp_path_factory, shared):
    return tmp_path_factory.mktemp("resume"), shared.model_dir, shared.corpus


@pytest.fixture(scope="module")
def trained(shared):
    return shared.run_dir


def test_a_checkpoint_copied_in_from_another_run_folder_needs_resume_from(user, trained):
    """Saved by run A (the `trained` folder), copied into run B (another plan.json): B refuses to resume it
    silently; `--resume-from` names it and B continues from its step."""
    root, model_dir, corpus = user
    assert emit(root, model_dir, "run B", "--data", corpus, "--lr", "2e-4").returncode == 0
    shutil.copytree(trained / "checkpoints", root / "run B" / "checkpoints")
    copied = root / "run B" / "checkpoints" / "global_step2"
    one_line_error(cli("train", root / "run B", "--steps", "3"), "was saved by another run folder")
    resumed = train_with_warm_ranks(root / "run B", "--steps", "3", "--nproc", "1", "--resume-from", copied)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming from {copied}" in resumed.stdout


def test_steps_below_the_checkpoints_step_are_refused_not_a_silent_run_of_nothing(user, trained):
    """--steps counts from the run's start: `--steps 1` beside a checkpoint at step 2 trained nothing, exited 0
    and rewrote final/. Refused in one line at `train` and in the ranks; the step the line names works."""
    root, _, _ = user
    run = root / "fewer steps"
    shutil.copytree(trained, run)
    refused = cli("train", run, "--steps", "1", "--dry-run")
    one_line_error(refused, "global_step2 is at step 2, past this run's 1 steps")
    assert "give --steps above 2" in refused.stderr
    direct = ["-m", "backends.run", "--plan", str(run), "--steps", "1"]
    one_line_error(run_python(direct, cwd=REPO_ROOT, env=cpu_env(), timeout=300), "past this run's 1 steps")
    assert cli("train", run, "--steps", "3", "--dry-run").returncode == 0  # the advice: above the checkpoint
    complete = run_python([*direct[:-1], "2"], cwd=REPO_ROOT, env=cpu_env(), timeout=300)  # at its last step
    assert complete.returncode == 0, complete.stderr[-2000:]
    assert "the run is complete at 2 steps: nothing to train (--steps above it trains on)" in complete.stdout


def test_a_smoke_test_in_a_folder_with_a_full_runs_checkpoint_is_refused_and_leaves_it(user, trained):
    """Found by a new user's audit (2026-11-30): `train DIR --tiny` after a full run was refused as "a checkpoint of
    another my-gpt2 (its config.json differs)", and its advice (--no-resume) moved the full run to previous/ for
    good. Both `train` and the ranks (launch.sh) now name the full run's checkpoint and the copy to smoke-test."""
    root, _, _ = user
    run = root / "smoke after a full run"
    shutil.copytree(trained, run)
    before = sorted(path.relative_to(run) for path in run.rglob("*"))
    said = f"{run} holds a full run's checkpoint (global_step2), which a --tiny smoke test cannot resume"
    refused = cli("train", run, "--tiny", "--steps", "1")
    one_line_error(refused, said)
    assert f"(cp -r '{run}' '{run}-smoke')" in refused.stderr  # the folder's name has spaces: quoted
    direct = ["-m", "backends.run", "--plan", str(run), "--tiny", "--steps", "1"]
    one_line_error(run_python(direct, cwd=REPO_ROOT, env=cpu_env(), timeout=300), said)
    assert sorted(path.relative_to(run) for path in run.rglob("*")) == before
    # Through launch.sh's plain torchrun on 2 ranks: rank 0 says the line; rank 1, ended by torchrun while it gave
    # rank 0 that time, said nothing more (its interruption's traceback followed the line, on a fresh clone).
    import subprocess

    launched = subprocess.run(["bash", str(run / "launch.sh"), "--tiny", "--steps", "1"], env=cpu_env(),
                              capture_output=True, text=True, timeout=300)  # fmt: skip
    assert launched.returncode != 0 and launched.stderr.count(said) == 1, launched.stderr[-3000:]
    assert "[rank1]: Traceback" not in launched.stderr and "Interrupted" not in launched.stderr, launched.stderr[-3000:]


def test_a_tiny_runs_checkpoint_on_real_data_resumes_through_trains_checks(user):
    """The data position records the block length; a --tiny run cuts it to the shrunken model's 32 tokens in
    the ranks, so `train`'s own check must count it the same way, or a smoke test on real data could not
    continue ("another --seq-len setting"). The reference: the ranks resume it."""
    root, model_dir, corpus = user
    assert emit(root, model_dir, "tiny resume", "--data", corpus).returncode == 0
    first = train_with_warm_ranks(root / "tiny resume", "--tiny", "--steps", "1", "--nproc", "1")
    assert first.returncode == 0, first.stderr[-2000:]
    checked = cli("train", root / "tiny resume", "--tiny", "--steps", "2", "--dry-run")
    assert checked.returncode == 0, checked.stderr
    direct = ["-m", "backends.run", "--plan", str(root / "tiny resume"), "--tiny", "--steps", "2"]
    resumed = run_python(direct, cwd=REPO_ROOT, env=cpu_env(), timeout=300)
    assert resumed.returncode == 0 and "resuming from" in resumed.stdout, resumed.stderr[-2000:]


def test_resume_from_as_the_docs_write_it_names_the_runs_own_checkpoint_from_anywhere(
    user, trained, monkeypatch, tmp_path
):
    """docs/running.md's `--resume-from checkpoints/global_step<N>` was looked up from the working folder only:
    typed outside the run folder, `train` said "not a checkpoint of the runner". Now from there, then from the
    run folder, in `train`'s checks and in the ranks alike; a folder that is nowhere says so."""
    from backends.runner.checkpoints import RunCheckpoints

    root, _, _ = user
    run = root / "resume from"
    shutil.copytree(trained, run)
    monkeypatch.chdir(tmp_path)  # not the run folder
    assert cli("train", run, "--dry-run", "--resume-from", "checkpoints/global_step1").returncode == 0
    chosen = RunCheckpoints(run / "checkpoints", keep_last=2).newest(Path("checkpoints/global_step1"))
    assert chosen == (run / "checkpoints" / "global_step1").resolve()
    missing = cli("train", run, "--dry-run", "--resume-from", "checkpoints/global_step9")
    one_line_error(missing, f"--resume-from checkpoints/global_step9: no such folder (looked for here and in {run}")


def test_resume_from_under_the_trainer_door_names_a_trainer_checkpoint(user, trained):
    """`train --trainer --resume-from` was refused outright (the door resumed only the Trainer's newest). Now it
    takes a checkpoints-trainer/checkpoint-<N> (a real resume from one: tests/test_emit_runs.py), and each door
    handed the other's checkpoint says which door resumes it, in one line, before any rank starts."""
    root, _, _ = user
    run = root / "trainer resume from"
    shutil.copytree(trained, run)
    saved = run / "checkpoints-trainer" / "checkpoint-2"
    saved.mkdir(parents=True)
    (saved / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    assert (
        cli("train", run, "--dry-run", "--trainer", "--resume-from", "checkpoints-trainer/checkpoint-2").returncode == 0
    )
    one_line_error(
        cli("train", run, "--dry-run", "--trainer", "--resume-from", "checkpoints/global_step1"),
        "--resume-from checkpoints/global_step1: a checkpoint of the runner (its runner_state.json): drop --trainer",
    )
    one_line_error(
        cli("train", run, "--dry-run", "--resume-from", saved),
        f"--resume-from {saved}: a checkpoint of the HF Trainer door (its trainer_state.json); add --trainer",
    )
    one_line_error(
        cli("train", run, "--dry-run", "--trainer", "--resume-from", "checkpoints-trainer/checkpoint-9"),
        f"--resume-from checkpoints-trainer/checkpoint-9: no such folder (looked for here and in {run})",
    )
    (saved / "trainer_state.json").write_text('{"global_step": ')  # cut short
    one_line_error(
        cli("train", run, "--dry-run", "--trainer", "--resume-from", saved), "trainer_state.json cannot be read"
    )


def test_resuming_on_other_data_is_refused_unless_the_data_position_is_reset(user, trained, tmp_path):
    """The checkpoint stands at sample 16 of corpus.txt; resumed with --data other.txt that position would index
    other text. Refused in one line, at `train` and in the ranks (`python -m backends.run`); the reference, the
    folder's own data, resumes; --reset-data-position continues the weights at step 2 from other.txt's start."""
    root, _, corpus = user
    run = root / "other data"
    shutil.copytree(trained, run)
    other = tmp_path / "other.txt"
    other.write_text(corpus.read_text()[::-1])
    assert cli("train", run, "--dry-run").returncode == 0  # the reference: the same checkpoint, the same data
    one_line_error(cli("train", run, "--steps", "3", "--data", other), "stands at sample 16 of ")
    assert "this run trains on " in cli("train", run, "--dry-run", "--data", other).stderr
    direct = ["-m", "backends.run", "--plan", str(run), "--steps", "3", "--data", str(other)]
    one_line_error(run_python(direct, cwd=REPO_ROOT, env=cpu_env(), timeout=300), "pass --reset-data-position")
    resumed = train_with_warm_ranks(run, "--steps", "3", "--nproc", "1", "--data", other, "--reset-data-position")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "--reset-data-position: reading" in resumed.stdout and "stood at sample 16 of" in resumed.stdout
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if row["kind"] == "train"] == [1, 2, 3]  # 1-2 before, 3 on other.txt


def test_the_resume_words_name_the_folder_and_a_way_out_that_is_accepted(tmp_path):
    """An audit: a checkpoint named by --resume-from from another folder was "saved under an earlier plan.json",
    and a strategy refusal beside --resume-from advised --no-resume, which is refused beside it."""
    from backends.runner.checkpoints import check_resumable, saved_under
    from planner.errors import UserInputError

    here, there = tmp_path / "zz1", tmp_path / "zz3"
    assert saved_under({"plan_digest": "a"}, "a", here) == "this plan.json"
    assert saved_under({"plan_digest": "b", "run_dir": str(here)}, "a", here) == "an earlier plan.json"
    assert saved_under({"plan_digest": "b", "run_dir": str(there)}, "a", here) == f"{there}'s plan.json"
    state = {"saved_under": {"model_fingerprint": "f", "strategy": "ddp", "run_dir": str(there)}}
    common = dict(folder=there / "global_step2", model_name="gpt2", fingerprint="f", strategy="engine", here=here)
    for explicit, way_out in ((True, f"or drop --resume-from {there / 'global_step2'}"), (False, "or start afresh "
                                                                                                   "with --no-resume")):  # fmt: skip
        with pytest.raises(UserInputError) as refused:
            check_resumable(state, explicit=explicit, **common)
        assert str(refused.value).endswith(f"resume with --strategy ddp, {way_out}")
