"""What PlanCallback stores (it records by default) at the end of a Trainer run, against the runner's rule
(backends/runner/summary.py): a `--gpu cpu` plan predicts the step time of the CPU processes that run it, so
the record carries that prediction beside the measurement, as `train` and `tune` records do, and calibration
learns from the pair; a step the plan did not predict (another accumulation, or checkpointing the plan has not)
carries none.

The callback's hooks are called directly with the Trainer's own arguments and state objects; the step times
are set, not timed (the reference is the plan's prediction, not a clock).
"""

from __future__ import annotations

import re

import pytest

from planner.evaluate import evaluate
from tests.emit_plans import make_plan


def _recorded(tmp_path, gpu: str = "cpu", **overrides):
    from transformers import TrainerControl, TrainerState

    from benchmarks_db.store import BenchmarkStore
    from hardware_selector import training_arguments
    from hardware_selector.integrations import PlanCallback

    plan = make_plan("gpt2", gpu=gpu, gpus_per_node=1, strategy="ddp", seq_len=64, micro_batch=4, grad_accum=1)
    plan = plan.model_copy(update={"throughput": evaluate(plan.model, plan.config, plan.cluster).throughput})
    callback = PlanCallback(plan, strict=False, record=True, db=tmp_path / "runs.duckdb", say=lambda line: None)
    args = training_arguments(plan, tmp_path / "out", use_cpu=True, **overrides)
    state, control = TrainerState(), TrainerControl()
    callback.on_train_begin(args, state, control)
    predicted = plan.throughput.step_time_s
    callback.step_times.values = [2 * predicted, predicted, predicted, predicted]  # a first step, then steady
    state.global_step = 4
    callback.on_train_end(args, state, control)
    (stored,) = BenchmarkStore(tmp_path / "runs.duckdb").runs()
    assert stored.id == callback.record_id and stored.runner == "hf-trainer"
    return plan, stored


def test_a_cpu_plans_trainer_run_is_recorded_with_its_step_time_prediction(tmp_path):
    plan, stored = _recorded(tmp_path)
    assert stored.gpu_name == "cpu" and stored.step_time_median_s == pytest.approx(plan.throughput.step_time_s)
    assert stored.predicted_step_time_s == pytest.approx(plan.throughput.step_time_s)
    assert stored.mfu == pytest.approx(plan.throughput.mfu)  # measured at exactly the predicted step time


def test_a_trainer_run_of_another_step_than_the_plans_carries_no_prediction(tmp_path):
    _, stored = _recorded(tmp_path, gradient_accumulation_steps=2)
    assert stored.grad_accum == 2 and stored.predicted_step_time_s is None and stored.mfu is None


def test_a_trainer_run_with_checkpointing_the_plan_has_not_carries_no_prediction(tmp_path):
    # Same world, micro-batch and accumulation as the plan, but the forward is recomputed: another step.
    plan, stored = _recorded(tmp_path, gradient_checkpointing=True)
    assert plan.config.activation_checkpointing.value == "none"
    assert stored.grad_accum == 1 and stored.predicted_step_time_s is None and stored.mfu is None


def test_a_gpu_plan_trained_on_cpu_processes_is_recorded_as_cpu_without_the_gpu_prediction(tmp_path):
    _, stored = _recorded(tmp_path, gpu="A100-80GB", bf16=False)
    assert stored.gpu_name == "cpu" and stored.predicted_step_time_s is None


def _logged_line(tmp_path, gpu: str, **overrides) -> tuple[object, str]:
    """The line the callback prints at a logging step whose median step time is set to 1.5 x the prediction."""
    from transformers import TrainerControl, TrainerState

    from hardware_selector import training_arguments
    from hardware_selector.integrations import PlanCallback

    plan = make_plan("gpt2", gpu=gpu, gpus_per_node=1, strategy="ddp", seq_len=64, micro_batch=4, grad_accum=1)
    plan = plan.model_copy(update={"throughput": evaluate(plan.model, plan.config, plan.cluster).throughput})
    said: list[str] = []
    callback = PlanCallback(plan, strict=False, say=said.append)
    args = training_arguments(plan, tmp_path / "out", use_cpu=True, **overrides)
    state, control = TrainerState(), TrainerControl()
    callback.on_train_begin(args, state, control)
    said.clear()  # a non-strict mismatch warns first
    state.global_step, state.log_history = 2, [{"loss": 1.0}]
    callback.since_log = [1.5 * callback.run.predicted.step_time_s]
    callback.on_log(args, state, control)
    (line,) = said
    return callback.run.predicted, line


def test_a_cpu_plans_logged_line_compares_the_step_time_and_the_memory_as_train_does(tmp_path):
    """A `--gpu cpu` plan's estimate models a CPU rank: `train` sets its host RSS beside it (backends/runner/
    summary.py); the callback said "not compared with a GPU estimate" of a plan that has none."""
    predicted, line = _logged_line(tmp_path, "cpu")
    assert f"s/step vs predicted {predicted.step_time_s:.3g} (+50%; " in line
    estimate = f"vs predicted {predicted.peak_memory_bytes / 2**30:.2f} GiB (host peak RSS; {predicted.memory_source})"
    assert re.search(r"; host peak RSS [\d.]+ GiB ", line) and line.endswith(estimate), line


@pytest.mark.parametrize(
    ("gpu", "overrides"), [("A100-80GB", {"bf16": False}), ("cpu", {"gradient_accumulation_steps": 2})]
)
def test_a_step_the_plan_did_not_predict_on_cpu_processes_is_not_compared(tmp_path, gpu, overrides):
    """A GPU plan on CPU processes, or a Trainer running another step than the plan's (strict=False)."""
    _, line = _logged_line(tmp_path, gpu, **overrides)
    assert "vs predicted" not in line and line.endswith("(CPU processes: the plan's GPU predictions are not compared)")


@pytest.mark.parametrize(("variable", "records"), [(None, True), ("0", False), ("1", True)])
def test_the_doors_record_by_default_as_train_does_unless_told_not_to(tmp_path, monkeypatch, variable, records):
    """Every run calibrates: PlanCallback, Lightning's PlanMonitor and PlanRecorder record unless record=False or
    HARDWARE_SELECTOR_RECORD=0, the switch `train` reads (backends/runner/options.py)."""
    from backends.runner.options import RECORD_ENV_VAR
    from hardware_selector.integrations import PlanCallback, PlanMonitor, PlanRecorder

    plan = make_plan("gpt2", gpu="cpu", gpus_per_node=1, strategy="ddp", seq_len=64, micro_batch=4, grad_accum=1)
    if variable is None:
        monkeypatch.delenv(RECORD_ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(RECORD_ENV_VAR, variable)
    for door in (PlanCallback, PlanMonitor, PlanRecorder):
        assert door(plan).record is records, door
        assert door(plan, record=False).record is False and door(plan, record=True).record is True


@pytest.mark.parametrize(("grad_accum", "predicted"), [(None, True), (2, False)])
def test_a_loop_of_your_own_is_recorded_beside_the_prediction_only_at_the_plans_batch_split(
    tmp_path, grad_accum, predicted
):
    """PlanRecorder in one process for a 1-rank cpu plan: the plan's split carries the prediction (the runner's
    rule); another accumulation is another step, recorded without it."""
    from benchmarks_db.store import BenchmarkStore
    from hardware_selector.integrations import PlanRecorder

    plan = make_plan("gpt2", gpu="cpu", gpus_per_node=1, strategy="ddp", seq_len=64, micro_batch=4, grad_accum=1)
    plan = plan.model_copy(update={"throughput": evaluate(plan.model, plan.config, plan.cluster).throughput})
    said: list[str] = []
    recorder = PlanRecorder(plan, record=True, db=tmp_path / "runs.duckdb", say=said.append, log_every=2)
    for _ in range(4):
        recorder.step()
    assert [line.split(":")[0] for line in said] == ["step 2", "step 4"]
    predicted_step = plan.throughput.step_time_s
    recorder.step_times.values = [2 * predicted_step, predicted_step, predicted_step, predicted_step]  # set, not timed
    record_id = recorder.finish(grad_accum=grad_accum)
    (stored,) = BenchmarkStore(tmp_path / "runs.duckdb").runs()
    assert stored.id == record_id and stored.runner == "own-loop" and stored.steps_measured == 3
    assert stored.grad_accum == (grad_accum or 1)
    assert stored.step_time_median_s == pytest.approx(predicted_step)
    expected = pytest.approx(predicted_step) if predicted else None
    assert stored.predicted_step_time_s == expected


def test_a_step_faster_than_the_gpus_peak_allows_is_stored_without_a_rate_and_a_failed_record_is_one_line(tmp_path):
    """Found while adding PlanRecorder: a measured step whose rate would exceed the catalog's peak (mfu > 1) made
    the record invalid, and the exception ended the user's run after training, before its model was saved. The
    step time is stored without the rate; and any record that fails is one warning line, never an exception."""
    from benchmarks_db.store import BenchmarkStore
    from hardware_selector.integrations import PlanRecorder

    plan = make_plan("gpt2", gpu="cpu", gpus_per_node=1, strategy="ddp", seq_len=64, micro_batch=4, grad_accum=1)
    plan = plan.model_copy(update={"throughput": evaluate(plan.model, plan.config, plan.cluster).throughput})
    fast = plan.throughput.step_time_s * plan.throughput.mfu / 2  # twice the peak's rate
    recorder = PlanRecorder(plan, record=True, db=tmp_path / "runs.duckdb", say=lambda line: None)
    recorder.step_times.values = [fast] * 4
    recorder.steps = 4
    recorder.finish()
    (stored,) = BenchmarkStore(tmp_path / "runs.duckdb").runs()
    assert stored.step_time_median_s == pytest.approx(fast) and stored.mfu is None and stored.tflops_per_gpu is None
    assert stored.predicted_step_time_s == pytest.approx(plan.throughput.step_time_s)

    (tmp_path / "a-file").write_text("not a folder")
    said: list[str] = []
    broken = PlanRecorder(plan, record=True, db=tmp_path / "a-file" / "runs.duckdb", say=said.append)
    broken.step_times.values = [plan.throughput.step_time_s] * 2
    assert broken.finish() is None
    assert len(said) == 1 and said[0].startswith("warning: the run was not recorded in the benchmark database: ")
