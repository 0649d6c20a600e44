"""Doors from the frameworks users train with: `from hardware_selector.integrations import PlanCallback`.

- PlanCallback: the HF Trainer checked against a plan, measured against it,
  recorded (trainer_callback.py).
- PlanRecorder: a loop of your own (a DeepSpeed script, a PyTorch loop) measured
  against a plan and recorded (loop_recorder.py).
- PlanStrategy, EngineStrategy, plan_trainer_kwargs, PlanMonitor: PyTorch Lightning
  (lightning_strategy.py and lightning_monitor.py; the first also importable as
  hardware_selector.integrations.lightning;
  `pip install hardware-selector[lightning]`).

Each is imported on first use, so importing this package costs nothing.
"""

from __future__ import annotations

from typing import Any

_WHERE = {
    "PlanCallback": "backends.integrations.trainer_callback",
    "PlanMismatch": "backends.integrations.trainer_callback",
    "PlanRecorder": "backends.integrations.loop_recorder",
    "PlanStrategy": "backends.integrations.lightning_strategy",
    "EngineStrategy": "backends.integrations.lightning_strategy",
    "plan_trainer_kwargs": "backends.integrations.lightning_strategy",
    "PlanMonitor": "backends.integrations.lightning_monitor",
}
__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'hardware_selector.integrations' has no attribute '{name}'")
