"""Adapter: our engine (backends.initialize): ZeRO 0-3 on the data-parallel group, TP and PP from the layout.

The runner's anomaly rules are a callback of the engine's TrainingMonitor
(backends/monitoring/training_monitor.py), asked inside the optimizer step after the gradient
norm is known and before the update. Data
are split over the engine's data-parallel group only: tensor and pipeline
peers see the same batches. Checkpoints are the engine's own sharded format
(backends/checkpoint), which resumes under other layouts and ZeRO stages.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from backends.adapters.base import Adapter, AdapterSetup, Guard, StepOutcome


class EngineAdapter(Adapter):
    name = "engine"

    def __init__(self, setup: AdapterSetup):
        from backends.engine.initialize import initialize
        from backends.weights.source import source_for

        super().__init__(setup)
        pretrained = setup.weights_folder is not None
        module = setup.make_model(empty=pretrained)
        weights = source_for(module, setup.weights_folder) if pretrained else None
        self.engine, _, _, _ = initialize(model=module, config=setup.engine_config, weights=weights)
        self.data_rank, self.data_world = self.engine.data_parallel_rank, self.engine.data_parallel_world
        self.micro_batch, self.grad_accum = self.engine.micro_batch, self.engine.grad_accum

    def param_groups(self) -> list[dict]:
        return self.engine.optimizer.param_groups

    def train_step(self, micro_batches: list[dict], guard: Guard) -> StepOutcome:
        engine = self.engine
        engine.announce_decisions = False  # the runner reports the verdict itself, once
        engine.training_monitor.add_callback("anomaly rules", _as_callback(guard))
        began = time.perf_counter()
        engine.train_batch(micro_batches)
        finished = self.synchronize()
        phases = engine.monitor.history[-1]  # the engine's own timing of this step
        optimizer_s = phases.get("optimizer_s", 0.0) + phases.get("comm_s", 0.0)
        overflow = not engine.last_step_applied and engine.optimizer.last_grad_norm == float("inf")
        return StepOutcome(
            loss=engine.last_loss,
            grad_norm=engine.optimizer.last_grad_norm,
            applied=engine.last_step_applied,
            compute_s=max(0.0, finished - began - optimizer_s),
            optimizer_s=optimizer_s,
            overflow=overflow,
        )

    def eval_loss(self, batch: dict) -> float:
        return float(self.engine.eval_loss(batch))

    def save(self, folder: Path) -> None:
        from backends.checkpoint.save import write_engine_state

        write_engine_state(self.engine, folder)

    def load(self, folder: Path) -> None:
        from backends.checkpoint.load import read_engine_state

        read_engine_state(self.engine, folder)

    def full_state_dict(self) -> dict[str, Any] | None:
        from backends.checkpoint.export import consolidated_state_dict

        state = consolidated_state_dict(self.engine)
        return {name: value.cpu() for name, value in state.items()} if self.rank == 0 else None

    def held_bytes(self) -> int:
        return self.engine.optimizer.tracked_bytes()

    def close(self) -> None:
        self.engine.close()


def _as_callback(guard: Guard) -> Any:
    """The runner's guard (loss, norm) -> apply? as a monitor callback answering its verdict and reason."""

    def anomaly_rules(metrics: dict[str, float], step: int) -> tuple[str, str]:
        applied = guard(metrics["loss"], metrics.get("grad_norm"))
        pending = getattr(guard, "pending", None)  # the AnomalyGuard's verdict, with its reason
        if pending is not None:
            return pending.action, pending.reason
        return ("ok", "") if applied else ("skip-step", "the guard refused the update")

    return anomaly_rules
