"""plan.json read back: a round trip equal to the plan, one-line refusals of a file that cannot be read (here and
in the runner), and `--force` over a folder that holds the user's own files."""

from __future__ import annotations

import json

import pytest
from emit_plans import make_plan

from planner.rundir.run_options import run_config as run_target
from planner.rundir.write import emit_run_folder
from tests.distributed import REPO_ROOT, cpu_env
from tests.warm_process import run_python


def test_plan_json_round_trips(tmp_path):
    from planner.contract.schema import SCHEMA_VERSION
    from planner.rundir.plan_file import read_plan_file

    plan = make_plan(strategy="fsdp")
    written = emit_run_folder(plan, tmp_path / "run")  # Plan.emit is emit_run_folder
    assert {path.name for path in written} == {path.name for path in (tmp_path / "run").iterdir()}
    again, target = read_plan_file(tmp_path / "run")
    assert again == plan and target == run_target(plan)
    document = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert document["schema_version"] == SCHEMA_VERSION and document["run"]["schema_version"] == SCHEMA_VERSION
    # The one ParallelDims value, stored once: the config's split (dp left to the cluster), not repeated in "run".
    assert document["config"]["layout"]["dp"] is None and "layout" not in document["run"]
    assert target.layout == plan.layout and plan.layout.dp == 2
    assert document["estimate_sources"]["memory"]["activations"].startswith("formula:")


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda d: d.update(schema_version=1), "written by an older hardware-selector"),
        (lambda d: d["run"].update(schema_version=99), "newer than this hardware-selector"),
        (lambda d: d.pop("run"), "is not a plan.json written by"),
        (lambda d: d["run"].update(micro_batch=0), "'micro_batch'"),
    ],
)
def test_a_plan_json_that_cannot_be_read_is_one_line(tmp_path, edit, expected):
    from planner.errors import UserInputError
    from planner.rundir.plan_file import read_plan_file

    emit_run_folder(make_plan(strategy="ddp"), tmp_path)
    document = json.loads((tmp_path / "plan.json").read_text())
    edit(document)
    (tmp_path / "plan.json").write_text(json.dumps(document))
    with pytest.raises(UserInputError, match=expected) as caught:
        read_plan_file(tmp_path)
    assert "\n" not in str(caught.value)


def test_runner_refuses_bad_input_in_one_line(tmp_path):
    """One line on stderr, exit code 2: no run folder, or no plan.json in it."""
    for plan_dir, expected in ((tmp_path / "missing", "is not a directory"), (tmp_path, "has no plan.json")):
        completed = run_python(
            ["-m", "backends.run", "--plan", str(plan_dir)], cwd=REPO_ROOT, env=cpu_env(), timeout=120
        )
        assert completed.returncode == 2 and expected in completed.stderr, completed.stderr
        assert len(completed.stderr.strip().splitlines()) == 1


def test_force_replaces_only_files_this_project_wrote(tmp_path):
    """`plan --emit DIR --force` over a folder holding the user's own README.md moves it to previous/<time>/ and
    leaves their other files; a second emission replaces its own files (the manifest names them)."""
    from planner.rundir.manifest import MANIFEST

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "README.md").write_text("my notes\n")
    (run_dir / "notes.txt").write_text("keep\n")
    plan = make_plan(strategy="fsdp")
    written = emit_run_folder(plan, run_dir, force=True)
    (kept,) = (run_dir / "previous").iterdir()
    assert (kept / "README.md").read_text() == "my notes\n" and (run_dir / "notes.txt").read_text() == "keep\n"
    assert set((run_dir / MANIFEST).read_text().split()) == {path.name for path in written} - {MANIFEST}
    emit_run_folder(make_plan(strategy="deepspeed", zero_stage=1), run_dir, force=True)
    assert list((run_dir / "previous").iterdir()) == [kept]  # nothing of the user's left to move
    assert (run_dir / "ds_config.json").exists() and (run_dir / "notes.txt").exists()
    emit_run_folder(plan, run_dir, force=True)
    assert not (run_dir / "ds_config.json").exists()  # its own stale file goes; notes.txt stays
    assert (run_dir / "notes.txt").exists()
