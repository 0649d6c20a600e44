"""What training a number of tokens on a plan takes: time, GPU-hours and cost, with where the count came from.

One block, computed once here, for `plan --json` (each plan's `to_train`, at --tokens, the run's --steps or the
Chinchilla default) and for an emitted run folder's plan.json (`to_train`, at the run's own --steps; docs/
emitted-files.md). The figures are ThroughputEstimate's own methods (planner/throughput/result.py); the price is
the GPU's, with its source (planner/hardware/gpus.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.contract.run_config import RunConfig
    from planner.plan import Plan


def tokens_source(tokens_from: str | None) -> str:
    """Where a token count came from (None: the default the help names)."""
    from planner.search.request import CHINCHILLA_TOKENS_PER_PARAM

    return tokens_from or f"{CHINCHILLA_TOKENS_PER_PARAM} per parameter, Chinchilla; --tokens"


def to_train(plan: Plan, tokens: float, tokens_from: str | None = None) -> dict[str, Any] | None:
    """What training `tokens` on the plan takes, as `plan`'s cost and days columns compute it, or None for a
    plan with no speed estimate."""
    speed = plan.throughput
    if speed is None:
        return None
    world = plan.cluster.world_size
    return {
        "tokens": tokens,
        "tokens_source": tokens_source(tokens_from),
        "time_s": speed.time_to_train_s(tokens),
        "gpu_hours": speed.gpu_hours(tokens, world),
        "cost_usd": speed.cost_usd(tokens, world),
        "price_usd_per_gpu_hour": speed.price_usd_per_gpu_hour,
        "price_source": plan.cluster.gpu.price_source,
    }


def run_to_train(plan: Plan, run: RunConfig) -> dict[str, Any] | None:
    """What the emitted run itself takes: its --steps x global batch x seq tokens (the count `plan --emit --steps`
    costs). None for a run sized in epochs (its data's tokens are counted only when `train` tokenizes it) and for
    a run on other process counts than the plan's (--nproc: the plan's speed is not that run's)."""
    steps = run.optim.max_steps
    if steps is None or run.nproc_overridden:
        return None
    batch = run.global_batch
    source = f"--steps {steps} x global batch {batch} x seq {run.seq_len}"
    return to_train(plan, float(steps * batch * run.seq_len), source)
