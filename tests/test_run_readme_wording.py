"""The run folder README's summary and length lines read as English ("8 H100-80GB(es)" and "warmup 5% of the
run (at most 100) steps" did not)."""

from __future__ import annotations

from emit_plans import make_plan

from planner.rundir.run_options import RunOptions
from planner.rundir.write import emit_run_folder


def _readme(tmp_path, plan, **kwargs) -> str:
    emit_run_folder(plan, tmp_path / "run", **kwargs)
    return (tmp_path / "run" / "README.md").read_text()


def test_the_process_count_is_said_in_words(tmp_path):
    gpus = _readme(tmp_path / "gpu", make_plan(gpu="H100-80GB", gpus_per_node=8, nodes=2, strategy="fsdp"))
    assert "Written by hardware-selector. 2 nodes x 8 H100-80GB GPUs = 16 processes; layout" in gpus
    cpu = _readme(tmp_path / "cpu", make_plan(strategy="ddp"))
    assert "Written by hardware-selector. 1 node x 2 CPU processes = 2 processes; layout" in cpu
    assert "(es)" not in gpus + cpu


def test_the_warmup_is_said_in_words(tmp_path):
    default = _readme(tmp_path / "default", make_plan(strategy="ddp"))
    assert "warmup 5% of the run's steps (at most 100), " in default and "100) steps" not in default
    options = RunOptions.model_validate({"optim": {"warmup_steps": 1, "max_steps": 10}})
    given = _readme(tmp_path / "given", make_plan(strategy="ddp"), options=options)
    assert "warmup 1 step, " in given
