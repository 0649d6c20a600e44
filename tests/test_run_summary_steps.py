"""run_summary.json names both predicted steps: the plan's (calibrated or measured when the benchmark records moved
it) and the formula's (docs/running.md, "At the end").

Found after the closed loop's first runs: run_summary.json's `predicted_step_time_s` was the plan's calibrated
figure while the benchmark record's field of the same name is the formula's (the calibration fits on it), so a
reader comparing the two files saw one name for two numbers. The summary keeps `predicted_step_time_s` as it was
(old files read the same) and adds `formula_step_time_s` and `predicted_step_source` beside it. The reference: a
plan whose formula step (evaluate()) the test itself scales by 2, as a correction would."""

from __future__ import annotations

import json

import pytest

from planner.calibration import rescaled
from planner.evaluate import evaluate
from planner.rundir.write import emit_run_folder
from tests.distributed import REPO_ROOT, cpu_env
from tests.emit_plans import make_plan
from tests.warm_process import run_python

SOURCE = "calibration: ddp on cpu: x2 (1 record: test0000)"


def test_the_summary_names_the_plans_step_and_the_formulas(tmp_path):
    plan = make_plan("gpt2", gpus_per_node=1, strategy="ddp", seq_len=32, micro_batch=2, grad_accum=1)
    formula = evaluate(plan.model, plan.config, plan.cluster).throughput
    calibrated = rescaled(formula, 2 * formula.step_time_s, SOURCE, SOURCE)  # as Calibration.corrected() does
    emit_run_folder(plan.model_copy(update={"throughput": calibrated}), tmp_path / "run")
    completed = run_python(
        ["-m", "backends.run", "--plan", str(tmp_path / "run"), "--tiny", "--synthetic", "--steps", "2"],
        cwd=REPO_ROOT,
        env=cpu_env(),
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    assert summary["predicted_step_time_s"] == pytest.approx(2 * formula.step_time_s)  # what the plan said
    assert summary["predicted_step_source"] == SOURCE
    # The formula's own step: what a benchmark record of this run stores as its predicted_step_time_s.
    assert summary["formula_step_time_s"] == pytest.approx(formula.step_time_s)
