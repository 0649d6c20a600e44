"""StepMonitor's phases are open names: a phase a user times is reported beside the engine's own.

Reference: a fake clock the test advances by known amounts (tests do not time things).
"""

from __future__ import annotations

import pytest

from backends.monitoring import step_monitor as monitor_module
from backends.monitoring.step_monitor import StepMonitor


def test_any_phase_name_is_timed_and_reported_beside_the_engines_phases(monkeypatch):
    clock = iter([0.0, 10.0, 10.5, 12.0, 20.0])  # start, phase in, phase out, end of step 1, end of step 2
    monkeypatch.setattr(monitor_module.time, "perf_counter", lambda: next(clock))
    monitor = StepMonitor()
    with monitor.phase("forward_pass"):
        pass
    monitor.add("data", 0.25)
    record = monitor.end_step(1, loss=1.0, tokens=10, tracked_bytes=0)
    assert (record["forward_pass_s"], record["data_s"], record["step_time_s"]) == (0.5, 0.25, 12.0)
    assert record["forward_s"] == record["backward_s"] == record["comm_s"] == 0.0  # the engine's, always there
    assert "forward_pass_s" not in monitor.end_step(2, loss=1.0, tokens=10, tracked_bytes=0)  # per step


@pytest.mark.parametrize("name", ["", None, 3])
def test_a_phase_needs_a_name(name):
    with pytest.raises(ValueError, match="non-empty string"):
        StepMonitor().add(name, 1.0)
