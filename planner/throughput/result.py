"""The typed result of the throughput estimator (the contract other parts read).

Every figure carries where it came from in `sources`: "formula: ...",
"calibration: ..." or "measured: benchmark record <id> (<date>)".
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class StepTimeBreakdown(BaseModel):
    """Seconds per optimizer step, by what the time is spent on.

    `exposed_*` is the part not hidden behind compute; the step time is
    compute + exposed communication + bubble + offload + optimizer step + measured shortfall.
    """

    model_config = ConfigDict(frozen=True)

    compute_s: float = Field(ge=0)
    recompute_s: float = Field(default=0.0, ge=0)
    data_parallel_comm_s: float = Field(default=0.0, ge=0)  # total, before overlap
    tensor_parallel_comm_s: float = Field(default=0.0, ge=0)
    pipeline_p2p_s: float = Field(default=0.0, ge=0)
    exposed_comm_s: float = Field(default=0.0, ge=0)
    pipeline_bubble_s: float = Field(default=0.0, ge=0)
    offload_s: float = Field(default=0.0, ge=0)
    optimizer_step_s: float = Field(default=0.0, ge=0)
    # A cost the implementation's published runs measure and no mechanism accounts for (measured_shortfall.py);
    # part of the step. Absent (left out of the JSON) where none applies.
    measured_shortfall_s: float = Field(default=0.0, ge=0, exclude_if=lambda value: value == 0.0)


class ThroughputEstimate(BaseModel):
    model_config = ConfigDict(frozen=True)

    step_time_s: float = Field(gt=0)
    tokens_per_s: float = Field(gt=0)
    samples_per_s: float = Field(gt=0)
    tflops_per_gpu: float = Field(ge=0)  # model FLOPs (no recompute) per GPU per second / 1e12
    mfu: float = Field(ge=0)
    hfu: float = Field(ge=0)
    global_batch: int = Field(ge=1)  # sequences per optimizer step
    breakdown: StepTimeBreakdown
    price_usd_per_gpu_hour: float | None = Field(default=None, ge=0)  # None: no price (cost figures need --price)
    sources: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    # GPUs the estimate is for; lets the helpers below run without being told.
    world_size: int | None = Field(default=None, ge=1)
    # The formula's own step where the records moved step_time_s (planner/calibration.py rescaled()): what a run
    # of this plan records as its prediction, since the calibration fits measured against the formula and a
    # calibrated figure fed back would compound (docs/benchmarks.md, "Calibration"). Absent (left out of the
    # JSON): step_time_s is the formula's.
    formula_step_time_s: float | None = Field(default=None, gt=0, exclude_if=lambda value: value is None)

    @property
    def formula_step_s(self) -> float:
        """The formula's step time, whether or not the records moved this estimate."""
        return self.formula_step_time_s or self.step_time_s

    def time_to_train_s(self, tokens: float) -> float:
        return tokens / self.tokens_per_s

    def gpu_hours(self, tokens: float, world_size: int | None = None) -> float:
        return self.time_to_train_s(tokens) * self._world(world_size) / 3600.0

    def cost_usd(self, tokens: float, world_size: int | None = None) -> float | None:
        """USD to train `tokens`, or None where the GPU has no price."""
        if self.price_usd_per_gpu_hour is None:
            return None
        return self.gpu_hours(tokens, world_size) * self.price_usd_per_gpu_hour

    def _world(self, world_size: int | None) -> int:
        world = world_size if world_size is not None else self.world_size
        if world is None:
            raise ValueError("this estimate does not record its GPU count; pass world_size")
        return world
