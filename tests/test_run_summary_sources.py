"""`train`'s summary says where the predicted step time came from, beside it: a prediction that was an earlier
run's measurement (a benchmark record) is not read as the formula's, and the record line reads as a sentence.

finish_summary is called directly on a CPU plan's run (its step time is compared: the plan predicts the CPU
processes); the reference is the line written out in full from plan.json's own numbers."""

from __future__ import annotations

import types

import pytest
import torch

from backends.runner.summary import StepTimes, finish_summary
from planner.evaluate import evaluate
from planner.rundir.run_options import run_config
from tests.emit_plans import make_plan

RECORD_SOURCE = "measured: benchmark record 01a52a6b (2026-11-28)"


def _summary(tmp_path, throughput_source: str, *, record: bool = False):
    plan = make_plan("gpt2", gpus_per_node=1, strategy="ddp", seq_len=64, micro_batch=4, grad_accum=1)
    plan = plan.model_copy(update={"throughput": evaluate(plan.model, plan.config, plan.cluster).throughput})
    run = run_config(plan)
    run = run.model_copy(
        update={"predicted": run.predicted.model_copy(update={"throughput_source": throughput_source})}
    )
    times = StepTimes()
    for seconds in (0.5, 0.0678, 0.0678, 0.0678):
        times.add(seconds)
    said: list[str] = []
    summary = finish_summary(
        spec=types.SimpleNamespace(plan=plan, strategy=plan.config.strategy, run_dir=tmp_path),
        run=run,
        args=types.SimpleNamespace(tiny=False, record=record, db=tmp_path / "runs.duckdb", metrics=None),
        adapter=types.SimpleNamespace(rank=0, distributed=False, device=torch.device("cpu")),
        times=times,
        steps=4,
        eval_rows=[],
        resumed_from=None,
        wall_s=1.0,
        stopped=None,
        guard=types.SimpleNamespace(counts={}),
        say=said.append,
    )
    return run.predicted.step_time_s, summary, said


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        (RECORD_SOURCE, RECORD_SOURCE),
        ("calibration: ddp on cpu: x1.38 (1 record: 2b9151c2)", "calibration: ddp on cpu: x1.38 (1 record: 2b9151c2)"),
        ("formula: micro-batches x (forward + backward + recompute) + exposed communication", "formula"),
        ("", "formula"),  # a plan.json from before sources were written: the formula predicted it
    ],
)
def test_the_step_time_line_names_the_predictions_source(tmp_path, source, shown):
    predicted, summary, _ = _summary(tmp_path, source)
    change = (0.0678 / predicted - 1) * 100
    assert summary["lines"][0] == (
        f"step time: measured 0.0678 s/step vs predicted {predicted:.3g} s/step ({change:+.0f}%; {shown})"
    )


def test_the_record_line_says_what_no_record_does(tmp_path):
    _, summary, said = _summary(tmp_path, RECORD_SOURCE, record=True)
    assert said[-1] == f"recorded run {summary['record_id'][:12]} in the benchmark database (--no-record skips this)"
