"""The ways the runner trains a plan: our engine, torch DDP, FSDP2 and DeepSpeed, behind one surface (base.py).

The HF Trainer is the fifth door (trainer.py): it runs its own loop, so it is
driven by the runner's callbacks rather than by this surface.
"""

from __future__ import annotations

from backends.adapters.base import Adapter, AdapterSetup, StepOutcome

__all__ = ["Adapter", "AdapterSetup", "StepOutcome", "build_adapter"]


def build_adapter(strategy: str, setup: AdapterSetup) -> Adapter:
    if strategy == "engine":
        from backends.adapters.engine_adapter import EngineAdapter

        return EngineAdapter(setup)
    if strategy == "ddp":
        from backends.adapters.ddp import DdpAdapter

        return DdpAdapter(setup)
    if strategy == "fsdp":
        from backends.adapters.fsdp import FsdpAdapter

        return FsdpAdapter(setup)
    if strategy == "deepspeed":
        from backends.adapters.deepspeed_adapter import DeepSpeedAdapter

        return DeepSpeedAdapter(setup)
    raise ValueError(f"no adapter for strategy {strategy!r}")
