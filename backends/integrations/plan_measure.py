"""What the framework doors share: a run's optimizer steps set beside the plan's predictions, then recorded.

The HF Trainer's PlanCallback (trainer_callback.py) and Lightning's PlanMonitor (lightning_monitor.py) each
tell this class when a run starts, when an optimizer step ends and when to log, with their own hooks; it keeps
the step times, writes the one line that compares them with the plan as `train` does, and at the end stores the
run in the benchmark database, where calibration learns from it (docs/integrations.md). The comparison follows
the runner's rule (backends/runner/summary.py): a `--gpu cpu` plan predicts the step of the CPU processes that
run it; a GPU plan's step and memory are compared on GPUs only; a run whose step is not the plan's (another
accumulation, precision or checkpointing) is compared with nothing and recorded without the prediction.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from backends.monitoring.step_monitor import peak_rss_bytes
from backends.runner.options import RECORD_ENV_VAR
from backends.runner.summary import StepTimes
from planner.contract.sources import prediction_source
from planner.plan import Plan
from planner.rundir.plan_file import plan_and_run

GIB = 2**30


def recording_default() -> bool:
    """Whether a run records itself when not told: yes, as `train` does, unless HARDWARE_SELECTOR_RECORD=0
    (a CI job, a test suite: docs/running.md)."""
    return os.environ.get(RECORD_ENV_VAR, "1") != "0"


class PlanMeasurement:
    """A run measured against `plan`; `record` None: recording_default(); False keeps it out of the database."""

    def __init__(self, plan: Plan | str | Path, *, record: bool | None, db: str | Path | None, say: Any) -> None:
        self.plan, self.run = plan_and_run(plan)
        self.record = recording_default() if record is None else record
        self.db, self.say = db, say
        self.step_times = StepTimes()  # every optimizer step's wall time; the runner's: median past the first
        self.since_log: list[float] = []  # the steady steps since the last logged line
        self.on_gpu = False
        self.runs_the_plan = True  # the framework's step is the plan's (no differences at the start)
        self.record_id: str | None = None
        self._tick: float | None = None

    def started(self, *, on_gpu: bool) -> None:
        self.on_gpu = on_gpu
        self._tick = time.perf_counter()

    def step_ended(self, step: int) -> None:
        """Optimizer step `step` (1-based) has just ended."""
        now = time.perf_counter()
        if self._tick is not None:
            self.step_times.add(now - self._tick)
            if step > 1:  # the first step warms up
                self.since_log.append(now - self._tick)
        self._tick = now

    def logged(self, step: int) -> dict[str, float | int | None] | None:
        """The comparison at a logging step (keys `plan/...`), said in one line; None when no step was timed."""
        if not self.since_log:
            return None
        measured = statistics.median(self.since_log)
        self.since_log = []
        peak = self.peak_bytes()
        predicted = self.run.predicted
        self.say(self._line(step, measured, peak))
        return {
            "plan/step_time_s": measured,
            "plan/peak_memory_bytes": peak,
            "plan/predicted_step_time_s": predicted.step_time_s,
            "plan/predicted_peak_memory_bytes": predicted.peak_memory_bytes,
        }

    def peak_bytes(self) -> int:
        if self.on_gpu:
            import torch

            return int(torch.cuda.max_memory_allocated())
        return peak_rss_bytes()

    def _line(self, step: int, measured: float, peak: int) -> str:
        predicted = self.run.predicted
        time_part = f"step {step}: {measured:.3g} s/step"
        memory_part = f"peak memory {peak / GIB:.2f} GiB"
        source = predicted.memory_source or "formula"
        if not self.on_gpu:
            # A `--gpu cpu` plan predicts these processes' step and memory, RSS with RSS (the runner's rule,
            # step_time_comparable; its estimate models a CPU rank); a GPU plan's predictions are not theirs.
            if self.plan.cluster.gpu.name != "cpu" or not predicted.step_time_s or not self.runs_the_plan:
                rss = f"host peak RSS {peak / GIB:.2f} GiB"
                return f"{time_part}, {rss} (CPU processes: the plan's GPU predictions are not compared)"
            memory_part, source = f"host peak RSS {peak / GIB:.2f} GiB", f"host peak RSS; {source}"
        if predicted.step_time_s:
            time_part += self._versus(measured)
        if predicted.peak_memory_bytes:
            memory_part += f" vs predicted {predicted.peak_memory_bytes / GIB:.2f} GiB ({source})"
        return f"{time_part}; {memory_part}"

    def _versus(self, measured: float) -> str:
        predicted = self.run.predicted
        assert predicted.step_time_s
        return (
            f" vs predicted {predicted.step_time_s:.3g} ({measured / predicted.step_time_s - 1:+.0%}; "
            f"{prediction_source(predicted.throughput_source)})"
        )

    def finished(self, *, world_size: int, micro_batch: int, grad_accum: int, steps: int, runner: str) -> None:
        """Store the run (when recording and any step was timed); call it on the main process only."""
        median = self.step_times.median()
        if not self.record or median is None:
            return
        from backends.runner.summary import record_or_warn, step_time_comparable
        from backends.runner.world import fit_to_world

        run, _ = fit_to_world(self.run, world_size, tiny=False)  # the world the framework ran on
        run = run.model_copy(
            update={
                "micro_batch": micro_batch,
                "grad_accum": grad_accum,
                "device": "cuda" if self.on_gpu else "cpu",  # where it ran, as the runner's record says
            }
        )
        # As the runner's record: the prediction goes beside the measurement when the step is the plan's, on
        # GPUs or on the CPU processes a `--gpu cpu` plan predicts (calibration learns from the pair).
        step_comparable = self.runs_the_plan and step_time_comparable(self.plan, run, tiny=False)
        summary = {
            "median_step_time_s": median,
            "step_time_spread_s": self.step_times.spread(),
            "steps": steps,
            "tokens_per_s": micro_batch * grad_accum * world_size * self.run.seq_len / median,
            "peak_memory_per_rank_bytes": [self.peak_bytes()],  # the main process's
            "comparable_to_prediction": self.on_gpu and step_comparable,
            "step_time_comparable": step_comparable,
            "tiny": False,
        }
        self.record_id, line = record_or_warn(self.plan, self.plan.config.strategy.value, run, summary, self.db, runner)
        self.say(line)
