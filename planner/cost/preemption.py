"""What spot preemptions cost a run that checkpoints every N steps (docs/search.md, "Cost across clouds").

The model, stated as the output states it:
- each rented instance is preempted at `rate` times per instance-hour (an assumption given by --preemption-rate,
  not a published figure), so the job is interrupted rate x instances times per hour of wall time;
- each preemption loses, on average, half a checkpoint interval of work (the interruption falls anywhere in it)
  plus `restart_s` to get a replacement and reload the checkpoint;
- so a run of T hours of work takes T / (1 - rate x instances x lost) hours of wall time, and the extra hours
  are paid at the spot price by every GPU. When rate x instances x lost >= 1 the run never finishes.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from planner.units import format_dollars

DEFAULT_PREEMPTION_RATE = 0.05  # per instance-hour: one preemption per instance every 20 hours, an assumption
DEFAULT_RESTART_MINUTES = 10.0  # a replacement instance, the image, the checkpoint read back: an assumption


class PreemptionCost(BaseModel):
    model_config = ConfigDict(frozen=True)

    rate_per_instance_hour: float = Field(ge=0)
    instances: int = Field(ge=1)
    checkpoint_every_steps: int = Field(ge=0)  # 0: only when a run stops, so the interval is the whole run
    checkpoint_interval_s: float = Field(ge=0)
    restart_s: float = Field(ge=0)
    lost_per_preemption_s: float = Field(ge=0)
    expected_preemptions: float = Field(ge=0)  # math.inf when the run never finishes
    work_s: float = Field(gt=0)  # the run without preemptions
    wall_s: float = Field(gt=0)  # with them (math.inf: never finishes)
    extra_usd: float = Field(ge=0)

    @property
    def finishes(self) -> bool:
        return math.isfinite(self.wall_s)

    def _interval_source(self) -> str:
        if not self.checkpoint_every_steps:
            return "--save-every 0: the whole run"
        step_s = self.checkpoint_interval_s / self.checkpoint_every_steps
        return f"--save-every {self.checkpoint_every_steps} steps x {step_s:.3g} s/step, the plan's step time"

    def describe(self) -> str:
        if not self.finishes:
            return (
                f"preemption: never finishes: {self.instances} instance(s) x {self.rate_per_instance_hour:g}/hour "
                f"lose {self.lost_per_preemption_s / 3600:.2f} h each (half the {self.checkpoint_interval_s / 60:.0f}"
                f"-minute checkpoint interval + {self.restart_s / 60:.0f} min restart), more than an hour per hour; "
                "checkpoint more often (--save-every) or rent fewer instances"
            )
        return (
            f"preemption: ~{self.expected_preemptions:.1f} expected ({self.rate_per_instance_hour:g} per instance-hour "
            f"[assumption, --preemption-rate] x {self.instances} instance(s)), each losing half the "
            f"{self.checkpoint_interval_s / 60:.1f}-minute checkpoint interval ({self._interval_source()}) + "
            f"{self.restart_s / 60:.0f} min restart "
            f"[assumption, --restart-minutes]: +{(self.wall_s - self.work_s) / 3600:.1f} h, +{format_dollars(self.extra_usd, compact=False)}"
        )


def preemption_cost(
    work_s: float,
    *,
    gpus: int,
    gpus_per_instance: int,
    price_per_gpu_hour: float,
    step_time_s: float,
    checkpoint_every_steps: int,
    rate_per_instance_hour: float = DEFAULT_PREEMPTION_RATE,
    restart_s: float = DEFAULT_RESTART_MINUTES * 60,
) -> PreemptionCost:
    """The expected extra wall time and dollars of a spot run (the model of the module docstring).
    checkpoint_every_steps 0 (only when stopping) makes the interval the whole run."""
    instances = max(1, math.ceil(gpus / gpus_per_instance))
    interval_s = checkpoint_every_steps * step_time_s if checkpoint_every_steps > 0 else work_s
    lost_s = interval_s / 2 + restart_s
    per_second = rate_per_instance_hour * instances / 3600.0  # preemptions per second of wall time
    slowdown = 1.0 - per_second * lost_s
    wall_s = work_s / slowdown if slowdown > 0 else math.inf
    extra = (wall_s - work_s) / 3600.0 * gpus * price_per_gpu_hour if math.isfinite(wall_s) else math.inf
    return PreemptionCost(
        rate_per_instance_hour=rate_per_instance_hour,
        instances=instances,
        checkpoint_every_steps=checkpoint_every_steps,
        checkpoint_interval_s=interval_s,
        restart_s=restart_s,
        lost_per_preemption_s=lost_s,
        expected_preemptions=per_second * wall_s,
        work_s=work_s,
        wall_s=wall_s,
        extra_usd=extra,
    )
