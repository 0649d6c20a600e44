"""`train` refuses a damaged run folder in one line (exit 2) before torchrun starts.

Each case damages one file of a folder the emitter wrote, the way a hand edit
or a bad copy would, and expects the line to name the file and the problem
(backends/runner/folder.py). The reference is the undamaged folder, which
passes the same checks (`train --dry-run` prints the torchrun command).
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from planner.rundir.write import emit_run_folder
from tests.emit_plans import make_plan


def train_dry_run(run_dir, *extra: str) -> tuple[int, str, str]:
    import hardware_selector

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = hardware_selector.main(["train", str(run_dir), "--dry-run", *extra])
    return code, out.getvalue(), err.getvalue()


def edit_json(name, change):
    def edit(run_dir):
        document = json.loads((run_dir / name).read_text())
        change(document)
        (run_dir / name).write_text(json.dumps(document))

    return edit


def write(name, text):
    return lambda run_dir: (run_dir / name).write_text(text)


DAMAGE = {
    "plan.json from a newer version": (
        "ddp",
        edit_json("plan.json", lambda d: d.update(schema_version=99)),
        "newer than this hardware-selector",
    ),
    "plan.json not JSON": ("ddp", write("plan.json", "{ not json"), "plan.json"),
    "accelerate YAML not YAML": ("ddp", write("accelerate_config.yaml", "a: [1, 2\nb: {"), "is not readable YAML"),
    "accelerate YAML a list": ("ddp", write("accelerate_config.yaml", "- 1\n- 2\n"), "must hold a mapping"),
    "accelerate YAML without processes": (
        "ddp",
        write("accelerate_config.yaml", "distributed_type: MULTI_GPU\nnum_machines: 1\nnum_processes: 0\n"),
        "num_processes must be a positive whole number, not 0",
    ),
    "accelerate YAML naming a missing ds_config": (
        "deepspeed",
        lambda run_dir: (run_dir / "ds_config.json").unlink(),
        "names deepspeed_config_file ds_config.json, which is not in",
    ),
    "ds_config.json a list": ("deepspeed", write("ds_config.json", "[1]"), "must hold a JSON object"),
    "engine.json not JSON": ("engine", write("engine.json", "{"), "engine.json"),
    "checkpoints is a file": ("ddp", write("checkpoints", "x"), "checkpoints is a file"),
    # One batch number edited: the run would train another global batch than the plan was made for.
    "plan.json run micro-batch edited": (
        "ddp",
        edit_json("plan.json", lambda d: d["run"].update(micro_batch=3)),
        "the run block's micro_batch 3 x grad_accum 2 x data-parallel 2 = 12 sequences per step, but the plan's "
        "config gives micro_batch 1 x grad_accum 2 x data-parallel 2 = 4",
    ),
    "plan.json config accumulation edited": (
        "ddp",
        edit_json("plan.json", lambda d: d["config"].update(grad_accum=4)),
        "but the plan's config gives micro_batch 1 x grad_accum 4 x data-parallel 2 = 8",
    ),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_run_folder_is_one_line_before_anything_starts(case, tmp_path):
    strategy, damage, expected = DAMAGE[case]
    extra = {"zero_stage": 2} if strategy == "deepspeed" else {}
    emit_run_folder(make_plan(strategy=strategy, **extra), tmp_path / "run")
    code, out, _ = train_dry_run(tmp_path / "run")
    assert code == 0 and "torch.distributed.run" in out  # the reference: the undamaged folder passes
    damage(tmp_path / "run")
    code, out, err = train_dry_run(tmp_path / "run")
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith("error: ") and expected in lines[0], lines


def test_a_previous_run_is_moved_aside_whole_and_a_checkpoint_volume_stays_mounted(tmp_path):
    """The reference is the folder before: every file of the old run is found again under previous/."""
    from planner.rundir.previous_run import archive_previous_run

    run_dir, scratch = tmp_path / "run", tmp_path / "scratch"
    emit_run_folder(make_plan(strategy="ddp"), run_dir)
    (run_dir / "checkpoints").mkdir()
    assert archive_previous_run(run_dir) is None  # an empty checkpoints/ (ready for a mount) is no run

    (run_dir / "checkpoints").rmdir()
    (scratch / "global_step2").mkdir(parents=True)
    (scratch / "global_step2" / "MANIFEST.json").write_text("{}")
    (scratch / "latest").write_text("global_step2")
    (run_dir / "checkpoints").symlink_to(scratch)  # checkpoints on another volume
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    moved = archive_previous_run(run_dir)
    assert moved is not None and moved.parent == run_dir / "previous"
    assert (moved / "metrics.jsonl").read_text() == '{"step": 1}\n' and not (run_dir / "metrics.jsonl").exists()
    assert (run_dir / "checkpoints").is_symlink()  # the volume stays where the user put it ...
    assert [p.name for p in scratch.iterdir()] == [f"previous-{moved.name}"]  # ... emptied of the old run,
    assert (moved / "checkpoints" / "latest").read_text() == "global_step2"  # which previous/ still reaches
    assert (moved / "checkpoints" / "global_step2" / "MANIFEST.json").is_file()
    assert (run_dir / "plan.json").is_file()  # the plan itself is not run state


def test_the_trainer_doors_checkpoints_are_run_state_whichever_door_starts_afresh(tmp_path):
    """A fresh engine run (or `plan --emit --force`) over a folder the HF Trainer door trained left its
    checkpoints-trainer/ in place, which a later `train --trainer` would have resumed under the new run."""
    from planner.rundir.previous_run import archive_previous_run

    run_dir = tmp_path / "run"
    emit_run_folder(make_plan(strategy="ddp"), run_dir)
    (run_dir / "checkpoints-trainer" / "checkpoint-4").mkdir(parents=True)
    (run_dir / "checkpoints-trainer" / "checkpoint-4" / "trainer_state.json").write_text('{"global_step": 4}')
    moved = archive_previous_run(run_dir)  # what the runner's loop calls on a fresh start (backends/runner/loop.py)
    assert moved is not None and not (run_dir / "checkpoints-trainer").exists()
    assert (moved / "checkpoints-trainer" / "checkpoint-4" / "trainer_state.json").read_text() == '{"global_step": 4}'


def test_a_re_emitted_folder_does_not_report_the_moved_run_as_its_own(tmp_path):
    """Found by a new user's audit: `plan --emit --force` (or `tune RUN_DIR`) over a trained folder moved its
    checkpoints, metrics and final/ to previous/ but left run_status.json, so `watch` said the new plan had
    finished 40/40 and named a checkpoint that was no longer there. The status is run state: it moves too."""
    import hardware_selector

    run_dir = tmp_path / "run"
    emit_run_folder(make_plan(strategy="ddp"), run_dir)
    (run_dir / "metrics.jsonl").write_text('{"kind": "train", "step": 1, "loss": 2.0}\n')
    status = {"state": "finished", "step": 1, "total_steps": 1, "checkpoint": str(run_dir / "checkpoints" / "x")}
    (run_dir / "run_status.json").write_text(json.dumps(status))
    emit_run_folder(make_plan(strategy="ddp"), run_dir, force=True)
    (kept,) = (run_dir / "previous").iterdir()
    assert json.loads((kept / "run_status.json").read_text()) == status
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert hardware_selector.main(["watch", str(run_dir), "--json"]) == 0
    assert json.loads(out.getvalue())["state"] == "not started"


def test_a_dry_run_makes_every_check_a_launch_makes_and_takes_nothing(tmp_path):
    """`train --dry-run` printed the torchrun command without the checks a real `train` makes before torchrun
    (the data, the run lock, the GPUs); it now makes each of them, and still takes no lock."""
    import torch

    from backends.runner.run_lock import LOCK_FILE, hold_run_lock
    from planner.contract.run_config import DataConfig
    from planner.rundir.write import RunOptions
    from scripts.demo_checkpoint import make_local_gpt2

    model_dir, corpus = make_local_gpt2(tmp_path / "user")
    mine = tmp_path / "mine.txt"
    mine.write_text(corpus.read_text())
    run_dir = tmp_path / "run"
    plan = make_plan(str(model_dir), gpus_per_node=1, strategy="ddp", seq_len=64, micro_batch=4, grad_accum=1)
    emit_run_folder(plan, run_dir, options=RunOptions(data=DataConfig(train=[str(mine)])))
    code, out, err = train_dry_run(run_dir)
    assert code == 0 and "torch.distributed.run" in out, err  # the reference: the folder as emitted passes
    assert not (run_dir / LOCK_FILE).exists()  # a dry run takes no lock

    lock = hold_run_lock(run_dir)  # another `train` of this folder, alive
    code, out, err = train_dry_run(run_dir)
    assert code == 2 and out == "" and err.startswith(f"error: {run_dir.resolve()} is being trained by PID "), err
    lock.close()

    mine.unlink()  # the data the folder names is gone
    code, out, err = train_dry_run(run_dir)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"plan.json reads its --data from {mine} (given at `plan --emit`), and nothing is there now" in err, err

    if not torch.cuda.is_available():
        emit_run_folder(make_plan(gpu="A100-80GB", strategy="ddp", precision="bf16-mixed"), tmp_path / "gpu")
        code, out, err = train_dry_run(tmp_path / "gpu")
        assert code == 2 and out == "" and "this plan runs on CUDA GPUs" in err, err


def test_a_checkpoint_without_data_is_refused_unless_random_tokens_are_asked_for(tmp_path):
    """Fine-tuning a checkpoint on random tokens is what a forgotten --data would do without a word; the
    reference is the same folder given --data, --synthetic or --tiny, which each pass."""
    from scripts.demo_checkpoint import make_local_gpt2

    model_dir, corpus = make_local_gpt2(tmp_path / "user")
    run_dir = tmp_path / "run"
    emit_run_folder(make_plan(str(model_dir), gpus_per_node=1, strategy="ddp", seq_len=64, micro_batch=4), run_dir)
    code, out, err = train_dry_run(run_dir)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "names no data, so it would train on random tokens: pass --data PATH" in err and "--synthetic" in err
    for extra in (["--data", str(corpus)], ["--synthetic"], ["--tiny"]):
        code, out, err = train_dry_run(run_dir, *extra)
        assert code == 0 and "torch.distributed.run" in out, (extra, err)
    code, out, err = train_dry_run(run_dir, "--synthetic", "--data", str(corpus))  # two answers: one line
    assert code == 2 and "--synthetic trains on random tokens and --data/--eval-data name text" in err, err
