"""TrainingMonitor: metrics, callbacks that decide each update, system stats, per-phase memory, TensorBoard,
profiling (backends/monitoring/training_monitor.py, backends/monitoring/profiling.py).

References: the weights before a step (a skipped or stopped update leaves
them exactly as they were; an applied one changes them), tensorboard's own
event reader for what the writer received, a fake NVML machine for the GPU
stats, and the torch profiler's Chrome trace for the profiled sections.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch
from torch import nn

import backends
from backends.monitoring.profiling import profile
from backends.monitoring.training_monitor import TrainingMonitor


class Regression(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(3, 1)

    def forward(self, x, y):
        return ((self.linear(x).squeeze(-1) - y) ** 2).mean()


def _engine(**block):
    config = {"train_micro_batch_size_per_gpu": 4, "hardware_selector": block} if block else {
        "train_micro_batch_size_per_gpu": 4}  # fmt: skip
    return backends.initialize(model=Regression(), config=config)[0]


def _step(engine, scale=1.0):
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(engine.global_steps))
    engine.backward(engine(x, scale * x.sum(-1)))
    engine.step()


def _weights(engine):
    return [p.detach().clone() for p in engine.module.parameters()]


def test_the_most_severe_answer_wins_and_every_reason_is_kept():
    monitor = TrainingMonitor()
    monitor.add_callback("quiet", lambda metrics, step: None)
    monitor.add_callback("noisy", lambda metrics, step: "warn")
    monitor.add_callback(
        "ceiling", lambda metrics, step: ("stop", f"loss {metrics['loss']} > 10") if metrics["loss"] > 10 else "ok"
    )
    assert monitor.decide({"loss": 1.0}, 1).action == "warn"
    decision = monitor.decide({"loss": 11.0}, 2)
    assert decision.action == "stop" and decision.reasons == ["noisy: warn", "ceiling: loss 11.0 > 10"]
    monitor.add_callback("typo", lambda metrics, step: "halt")
    with pytest.raises(ValueError, match="callback 'typo' answered 'halt'"):
        monitor.decide({"loss": 1.0}, 3)
    with pytest.raises(TypeError, match="must be a function"):
        monitor.add_callback("not callable", 3)


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_the_engines_updates_follow_the_callbacks(stage, caplog):
    engine = backends.initialize(model=Regression(), config={"train_micro_batch_size_per_gpu": 4,
                                                             "zero_optimization": {"stage": stage}})[0]  # fmt: skip
    answers = iter(["warn", "skip-step", "ok", "stop"])
    engine.training_monitor.add_callback("script", lambda metrics, step: next(answers))
    engine.optimizer.gathered_parameters() if stage == 3 else None
    applied = []
    for _ in range(4):
        before = _weights(engine)
        with caplog.at_level(logging.WARNING, logger="hardware_selector.engine"):
            _step(engine)
        if stage == 3:
            engine.optimizer.gathered_parameters()
        changed = any(not torch.equal(a, b) for a, b in zip(before, _weights(engine)))
        applied.append((engine.last_step_applied, changed))
    assert applied == [(True, True), (False, False), (True, True), (False, False)]
    assert engine.should_stop and "stopping: script: stop" in caplog.text and "warning: script: warn" in caplog.text
    assert engine.training_monitor.latest("loss") == engine.last_loss


def test_metrics_reach_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    engine = _engine()
    writer = SummaryWriter(tmp_path)
    engine.set_tensorboard_writer(writer)
    losses = []
    for _ in range(3):
        _step(engine)
        losses.append(engine.last_loss)
    writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [event.value for event in events.Scalars("loss")] == pytest.approx(losses, rel=1e-6)
    assert {"step_time_s", "forward_s", "backward_s", "lr"} <= set(events.Tags()["scalars"])
    with pytest.raises(TypeError, match="add_scalar"):
        engine.set_tensorboard_writer(object())


def test_memory_profile_has_every_phase():
    engine = _engine()
    _step(engine)
    report = engine.memory_profile()
    assert report["kind"] == "process resident memory (RSS)"
    assert set(report["peak_bytes"]) == {"forward", "backward", "optimizer"}
    assert all(value > 0 for value in report["peak_bytes"].values())


def test_profiled_sections_are_in_the_trace_and_in_the_metrics(tmp_path):
    engine = backends.initialize(model=Regression(), metrics_path=str(tmp_path / "metrics.jsonl"), config={
        "train_micro_batch_size_per_gpu": 4, "hardware_selector": {"profiling": {"step": 2, "output": str(tmp_path / "p")}}})[0]  # fmt: skip
    for _ in range(3):
        with profile("data_loading"):
            x = torch.randn(4, 3)
        engine.backward(engine(x, x.sum(-1)))
        engine.step()
    (trace,) = (tmp_path / "p").glob("step2-rank0.json")
    names = {event.get("name") for event in json.loads(trace.read_text())["traceEvents"]}
    assert "data_loading" in names
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all("data_loading_s" in row for row in rows) and len(rows) == 3


def test_system_stats_read_nvml_and_the_host(monkeypatch):
    from tests.fakes import fake_pynvml

    machine = fake_pynvml.dgx_a100()
    machine.gpus[0].memory_used, machine.gpus[0].utilization = 7 * 2**30, 93
    fake_pynvml.install(monkeypatch, machine)
    stats = TrainingMonitor().get_system_stats()
    assert len(stats["gpus"]) == 8
    assert stats["gpus"][0] == {"index": 0, "memory_used_bytes": 7 * 2**30, "memory_total_bytes": machine.gpus[0].memory_total,
                                "utilization_percent": 93}  # fmt: skip
    assert stats["process_rss_bytes"] > 0 and stats["host_memory_total_bytes"] >= stats["host_memory_available_bytes"]
    monkeypatch.delitem(__import__("sys").modules, "pynvml")
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # NVML absent: no GPUs, no error
    assert TrainingMonitor().get_system_stats()["gpus"] == []


def test_a_callback_of_the_metrics_alone_is_taken_and_a_wrong_signature_refused_at_registration():
    from backends.monitoring.training_monitor import TrainingMonitor

    monitor = TrainingMonitor()
    monitor.add_callback("loss-ceiling", lambda metrics: ("stop", "loss too high") if metrics["loss"] > 20 else None)
    monitor.add_callback("with-step", lambda metrics, step: "warn" if step == 3 else None)
    decision = monitor.decide({"loss": 25.0}, 3)
    assert decision.action == "stop" and decision.reasons == ["loss-ceiling: loss too high", "with-step: warn"]
    assert monitor.decide({"loss": 1.0}, 4).action == "ok"
    with pytest.raises(TypeError, match=r"callback 'bad' must take \(metrics, step\) or \(metrics\)"):
        monitor.add_callback("bad", lambda metrics, step, extra: None)
