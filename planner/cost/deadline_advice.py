"""A missed cost deadline: the one-line refusal (require_option) and what would make the deadline reachable, each
(docs/search.md, "Cost across clouds"); never a linear-scaling guess the search has already tested.

- a longer --deadline: the fastest option's wall time;
- more GPUs (--max-gpus): only when some option's time was still falling at the largest count searched for it,
  and not otherwise: larger counts were searched and were slower (with spot, more instances are preempted more);
- with spot: dropping --spot (the fastest option's time without preemptions), the --preemption-rate and the
  --save-every at which an option would meet the deadline (from T / (1 - rate x instances x lost) <= deadline,
  planner/cost/preemption.py).
"""

from __future__ import annotations

import math

from planner.cost.cloud_search import NODE_GPUS, CloudCostResult, CostOption, CostRequest
from planner.errors import UserInputError


def span(seconds: float) -> str:
    return f"{seconds / 86400:.3g} days" if seconds >= 86400 else f"{seconds / 3600:.3g} hours"


def _deadline_flag(seconds: float) -> str:
    days = seconds / 86400
    return f"{math.ceil(days * 10) / 10:g}d" if days >= 1 else f"{math.ceil(seconds / 3600 * 10) / 10:g}h"


def _still_falling(result: CloudCostResult) -> CostOption | None:
    """An option at the largest count searched for its offer (a cluster of servers) that is faster than every
    smaller count of it: a larger count, not searched, might be faster still."""
    by_offer: dict[tuple[str, str, str], list[CostOption]] = {}
    for option in result.considered:
        by_offer.setdefault((option.cloud, option.region, option.gpu), []).append(option)
    falling = []
    for options in by_offer.values():
        largest = max(options, key=lambda option: option.gpus)
        if largest.gpus_per_node < NODE_GPUS:
            continue  # priced as one instance: more GPUs of it are never searched (cloud_search.gpu_counts)
        smaller = [option.time_s for option in options if option is not largest]
        if math.isfinite(largest.time_s) and largest.time_s < min(smaller, default=math.inf):
            falling.append(largest)
    return min(falling, key=lambda option: (option.time_s, option.cost_usd)) if falling else None


def _rate_that_meets(option: CostOption, deadline_s: float) -> float | None:
    """The largest preemptions per instance-hour at which the option meets the deadline, or None: it cannot."""
    p = option.preemption
    if p is None or p.work_s >= deadline_s or p.lost_per_preemption_s <= 0:
        return None
    return (1 - p.work_s / deadline_s) * 3600 / (p.instances * p.lost_per_preemption_s)


def _save_every_that_meets(option: CostOption, deadline_s: float) -> int | None:
    """The largest --save-every (steps) at which the option meets the deadline at its rate, or None."""
    p = option.preemption
    if p is None or p.work_s >= deadline_s or p.rate_per_instance_hour <= 0:
        return None
    lost_s = (1 - p.work_s / deadline_s) * 3600 / (p.rate_per_instance_hour * p.instances)
    steps = math.floor(2 * (lost_s - p.restart_s) / option.step_time_s)
    return steps if steps >= 1 else None


def deadline_advice(result: CloudCostResult, request: CostRequest, fastest: CostOption) -> list[str]:
    """The remedies that would help, each with its computed figure."""
    advice = [f"give --deadline {_deadline_flag(fastest.time_s)} or more"]
    falling = _still_falling(result)
    if falling is not None:
        advice.append(
            f"raise --max-gpus above {request.max_gpus}: {falling.cloud} {falling.gpu} was fastest at {falling.gpus} "
            f"GPUs ({span(falling.time_s)}), the most searched"
        )
    spot = [option for option in result.considered if option.preemption is not None]
    if request.spot and spot:
        unpreempted = min(spot, key=lambda option: option.preemption.work_s)  # type: ignore[union-attr]
        work_s = unpreempted.preemption.work_s  # type: ignore[union-attr]
        if work_s <= result.deadline_s:
            advice.append(
                f"drop --spot: without preemptions {unpreempted.gpus} x {unpreempted.gpu} takes {span(work_s)} "
                "(at the on-demand price)"
            )
        rates = [(rate, option) for option in spot if (rate := _rate_that_meets(option, result.deadline_s))]
        if rates:
            rate, option = max(rates, key=lambda pair: pair[0])
            advice.append(
                f"--preemption-rate {rate:.3g} or less per instance-hour meets it on {option.gpus} x {option.gpu} "
                f"({option.cloud}), if your cloud's interruption history shows so"
            )
        saves = [(steps, option) for option in spot if (steps := _save_every_that_meets(option, result.deadline_s))]
        if saves:
            steps, option = max(saves, key=lambda pair: pair[0])
            if steps < request.checkpoint_every_steps or request.checkpoint_every_steps == 0:
                advice.append(
                    f"checkpoint every {steps:,} steps or fewer (--save-every) meets it on {option.gpus} x "
                    f"{option.gpu} ({option.cloud})"
                )
    return advice


def require_option(result: CloudCostResult, request: CostRequest) -> CostOption:
    """The winner, or one UserInputError that says what would meet the deadline (planner/cost/deadline_advice.py)."""
    if result.best is not None:
        return result.best
    if not result.considered:
        raise UserInputError(
            f"nothing fits: no plan on any priced GPU up to {request.max_gpus} GPUs ({'; '.join(result.skipped)}); "
            "raise --max-gpus, or see `plan --gpu ...` for why"
        )
    finishing = [option for option in result.considered if math.isfinite(option.time_s)]
    if not finishing:
        raise UserInputError(
            "no spot run finishes: at this --preemption-rate every option loses more work to preemptions than it "
            "does; checkpoint more often (--save-every) or lower --preemption-rate if your cloud's rate is lower"
        )
    fastest = min(finishing, key=lambda option: (option.time_s, option.cost_usd))
    raise UserInputError(
        f"no option trains {result.tokens:.3g} tokens within {span(result.deadline_s)}: the fastest, {fastest.gpus} x {fastest.gpu} on "
        f"{fastest.cloud}, takes {span(fastest.time_s)} (planner estimate); "
        + "; or ".join(deadline_advice(result, request, fastest))
    )
