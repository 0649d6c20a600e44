"""The run's anomaly rules: a NaN/Inf loss or gradient norm, a loss spike, a gradient-norm spike.

Each rule's action comes from the run config (planner/contract/run_config.py,
AnomalyPolicy): `warn` (one line, the step is applied), `skip-step` (the
update is not applied; the data move on) or `stop` (checkpoint the state
before this step's update and stop, saying why in one line). A spike is a
value more than `factor` times its moving average over the last `window`
applied steps; the averages only ever see healthy values, and start
judging once they hold `window` of them.

The guard is consulted by the adapter before the update, with the step's
loss and, where the engine knows it by then, its gradient norm. Engines that
report the norm only after updating (DeepSpeed) get the norm rules checked
after the step instead: `warn` and `stop` still apply there, `skip-step`
cannot, and the runner refuses that combination before training starts.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner.contract.run_config import AnomalyPolicy, SpikeRule

if TYPE_CHECKING:
    from backends.adapters.base import StepOutcome


class RunStopped(Exception):
    """An anomaly rule with action `stop` ended the run (the loop's or the Trainer door's); the message is the one
    line to print, and backends/run.py exits 3."""


@dataclass
class Verdict:
    action: str  # "ok", "warn", "skip-step" or "stop"
    reason: str = ""


@dataclass
class MovingAverage:
    window: int
    values: deque = field(default_factory=deque)

    def add(self, value: float) -> None:
        self.values.append(value)
        while len(self.values) > self.window:
            self.values.popleft()

    @property
    def ready(self) -> bool:
        return len(self.values) >= self.window

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)


SEVERITY = {"ok": 0, "warn": 1, "skip-step": 2, "stop": 3}


class AnomalyGuard:
    def __init__(self, policy: AnomalyPolicy):
        self.policy = policy
        self.loss_history = MovingAverage(policy.loss_spike.window)
        self.norm_history = MovingAverage(policy.grad_norm_spike.window)
        self.pending: Verdict = Verdict("ok")  # the verdict of the step in progress
        self.counts: dict[str, int] = {}

    # --- the adapter's guard -------------------------------------------------------------------
    def __call__(self, loss: float, grad_norm: float | None) -> bool:
        """Before the update: True to apply it. Records the verdict for the runner."""
        self.pending = self.judge(loss, grad_norm)
        return self.pending.action not in ("skip-step", "stop")

    def judge(self, loss: float, grad_norm: float | None, *, norm_only: bool = False) -> Verdict:
        verdicts = []
        if not norm_only:
            if not math.isfinite(loss):
                verdicts.append(Verdict(self.policy.non_finite, f"the loss is {loss}"))
            else:
                verdicts.append(self._spike("loss", loss, self.loss_history, self.policy.loss_spike))
        if grad_norm is not None:
            if not math.isfinite(grad_norm):
                verdicts.append(Verdict(self.policy.non_finite, f"the gradient norm is {grad_norm}"))
            else:
                verdicts.append(self._spike("gradient norm", grad_norm, self.norm_history, self.policy.grad_norm_spike))
        return max(verdicts, key=lambda verdict: SEVERITY[verdict.action], default=Verdict("ok"))

    @staticmethod
    def _spike(what: str, value: float, history: MovingAverage, rule: SpikeRule) -> Verdict:
        if history.ready and value > rule.factor * history.mean:
            return Verdict(
                rule.action,
                f"the {what} {value:.4g} is {value / history.mean:.1f}x its moving average "
                f"{history.mean:.4g} over {rule.window} steps (limit {rule.factor:g}x)",
            )
        return Verdict("ok")

    # --- after the step --------------------------------------------------------------------------
    def after_step(self, outcome: StepOutcome) -> Verdict:
        """The step's final verdict; learn from healthy values. Norm rules the adapter could not check
        before its update are judged here (their `skip-step` has been refused up front)."""
        verdict = self.pending
        if not outcome.norm_checked_before_update and outcome.grad_norm is not None and not outcome.overflow:
            late = self.judge(outcome.loss, outcome.grad_norm, norm_only=True)
            if SEVERITY[late.action] > SEVERITY[verdict.action]:
                verdict = late
        self.pending = Verdict("ok")
        if verdict.action == "ok" and outcome.applied:
            if math.isfinite(outcome.loss):
                self.loss_history.add(outcome.loss)
            if outcome.grad_norm is not None and math.isfinite(outcome.grad_norm):
                self.norm_history.add(outcome.grad_norm)
        if verdict.action != "ok":
            self.counts[verdict.action] = self.counts.get(verdict.action, 0) + 1
        return verdict

    # --- checkpoint state ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "loss": list(self.loss_history.values),
            "grad_norm": list(self.norm_history.values),
            "counts": dict(self.counts),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for value in state.get("loss", []):
            self.loss_history.add(float(value))
        for value in state.get("grad_norm", []):
            self.norm_history.add(float(value))
        self.counts = {key: int(value) for key, value in state.get("counts", {}).items()}


def refuse_unsupported(policy: AnomalyPolicy, adapter_name: str, checks_norm_before_update: bool) -> str | None:
    """Why this adapter cannot honour the policy (None when it can)."""
    if checks_norm_before_update:
        return None
    if (
        policy.grad_norm_spike.action == "skip-step"
        or policy.non_finite == "skip-step"
        or policy.loss_spike.action == "skip-step"
    ):
        return (
            f"anomaly action skip-step is not available with {adapter_name}: it applies the update before "
            "reporting the gradient norm; use warn or stop, or run the plan with --strategy engine"
        )
    return None
