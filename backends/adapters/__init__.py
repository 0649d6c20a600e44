"""The ways the runner trains a plan: our engine, torch DDP, FSDP2 and DeepSpeed, behind one surface (base.py).

The HF Trainer is the fifth door (trainer.py): it runs its own loop, so it is
driven by the runner's callbacks rather than by this surface.
"""

from __future__ import annotations

from backends.adapters.base import Adapter, AdapterSetup, StepOutcome

__all__ = ["Adapter", "AdapterSetup", "StepOutcome", "adapter_class", "build_adapter"]


def adapter_class(strategy: str) -> type[Adapter]:
    """The adapter of a strategy, its module imported only now (a class attribute says what it supports)."""
    if strategy == "engine":
        from backends.adapters.engine_adapter import EngineAdapter

        return EngineAdapter
    if strategy == "ddp":
        from backends.adapters.ddp import DdpAdapter

        return DdpAdapter
    if strategy == "fsdp":
        from backends.adapters.fsdp import FsdpAdapter

        return FsdpAdapter
    if strategy == "deepspeed":
        from backends.adapters.deepspeed_adapter import DeepSpeedAdapter

        return DeepSpeedAdapter
    raise ValueError(f"no adapter for strategy {strategy!r}")


def build_adapter(strategy: str, setup: AdapterSetup) -> Adapter:
    return adapter_class(strategy)(setup)
