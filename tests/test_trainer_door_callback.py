"""The HF Trainer door's callback (backends/runner/trainer.py) against the runner's loop: an anomaly rule's
`stop` ends the run as the loop's does, and the steps it times are what the summary's median reads.

In process, on transformers' own TrainerState and TrainerControl: the door's launches are in
tests/test_emit_runs.py; this holds what a real run reaches only on a NaN.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from backends.runner.anomaly import AnomalyGuard
from backends.runner.trainer import _metrics_callback
from planner.contract.run_config import AnomalyPolicy


class Rows:
    def __init__(self) -> None:
        self.rows: list[tuple[str, dict]] = []

    def write(self, kind: str, row: dict) -> None:
        self.rows.append((kind, row))


def _callback():
    pytest.importorskip("transformers")
    quiet = SimpleNamespace(say=lambda line: None, update=lambda *args, **kwargs: None)
    rows = Rows()
    run = SimpleNamespace(global_batch=8, seq_len=64)
    callback = _metrics_callback(rows, quiet, AnomalyGuard(AnomalyPolicy()), run, quiet)
    return callback, rows


def _step(callback, step: int, loss: float):
    from transformers import TrainerControl, TrainerState

    state, control = TrainerState(global_step=step), TrainerControl()
    args = SimpleNamespace(output_dir="/run/checkpoints-trainer")
    callback.on_step_begin(args, state, control)
    callback.on_step_end(args, state, control)
    callback.on_log(args, state, control, logs={"loss": loss, "learning_rate": 1e-3, "grad_norm": 1.0})
    return control


def test_a_nan_loss_stops_as_the_runners_loop_stops():
    """The default rule (a non-finite loss: stop) stops the Trainer, saves its step, and leaves the one line the
    door raises RunStopped with (run.py: exit 3, `stopped`); before, the run ended `finished`, exit 0."""
    callback, rows = _callback()
    assert not _step(callback, 1, 2.5).should_training_stop and callback.stopped is None
    control = _step(callback, 2, float("nan"))
    assert control.should_training_stop and control.should_save
    assert callback.stopped == (
        "training stopped at step 2: the loss is nan; the state after that step's update is in "
        "/run/checkpoints-trainer/checkpoint-2 (change the anomaly rules in plan.json to go on)"
    )
    assert rows.rows[-1][1]["anomaly"] == {"action": "stop", "reason": "the loss is nan"}


def test_each_step_is_timed_once_and_the_rows_say_the_same_time():
    callback, rows = _callback()
    for step in (1, 2, 3):
        _step(callback, step, 2.0)
    assert len(callback.times.values) == 3
    assert [row["step_s"] for _, row in rows.rows] == callback.times.values
