"""`PlanCallback(plan)`: the HF Trainer checked against a plan, measured against it, and recorded.

    from hardware_selector import training_arguments
    from hardware_selector.integrations import PlanCallback

    args = training_arguments("runs/x", "out")          # or your own TrainingArguments
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[PlanCallback("runs/x", record=True)])

1. At on_train_begin the Trainer's arguments are compared with the plan
   (batch sizes, accumulation, precision, DeepSpeed ZeRO stage and offload,
   FSDP sharding and offload, activation checkpointing:
   backends/integrations/plan_check.py). Any difference is one line; with
   strict=True (the default) it stops before the first step
   (PlanMismatch, a ValueError), else it is a warning.
2. Every logging step, the median optimizer-step time and the peak memory
   since the last log go beside the plan's predictions, with where each
   prediction came from, into the log history (keys `plan/...`) and one line
   on the main process. On CPU processes the step time is compared only with
   a `--gpu cpu` plan's prediction (as `train` compares it), and memory never
   (host RSS is no GPU estimate).
3. With record=True the run is stored in the benchmark database at
   on_train_end (benchmarks_db), where calibration learns from it; beside the
   plan's step-time prediction when the Trainer ran the plan's own step, on
   GPUs or on the CPU processes a `--gpu cpu` plan predicts (the runner's rule).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from backends.integrations.plan_check import trainer_differences
from backends.monitoring.step_monitor import peak_rss_bytes
from backends.runner.summary import StepTimes
from planner.errors import UserInputError
from planner.plan import Plan
from planner.rundir.plan_file import plan_and_run

GIB = 2**30


class PlanMismatch(UserInputError):
    """The Trainer does not run the plan it was given (one line naming each difference)."""


class PlanCallback(TrainerCallback):
    def __init__(
        self,
        plan: Plan | str | Path,
        *,
        strict: bool = True,
        record: bool = False,
        db: str | Path | None = None,
        say: Any = print,
    ):
        self.plan, self.run = plan_and_run(plan)
        self.strict, self.record, self.db, self.say = strict, record, db, say
        self.step_times = StepTimes()  # every optimizer step's wall time; the runner's: median past the first
        self._since_log: list[float] = []
        self._tick: float | None = None
        self._on_gpu = False
        self._runs_the_plan = True  # the Trainer's step is the plan's (no differences at on_train_begin)
        self.record_id: str | None = None

    # 1. the check
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import torch

        self._on_gpu = torch.cuda.is_available() and not getattr(args, "use_cpu", False)
        differences = trainer_differences(args, self.plan, self.run)
        self._runs_the_plan = not differences
        if differences:
            line = (
                f"the Trainer does not run the plan for {self.plan.model.name}: {'; '.join(differences)}; "
                "build the arguments with training_arguments(plan, ...) or plan again"
            )
            if self.strict:
                raise PlanMismatch(line)
            if state.is_world_process_zero:
                self.say(f"warning: {line}")
        self._tick = time.perf_counter()

    # 2. measured vs predicted
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        if self._tick is not None:
            self.step_times.add(now - self._tick)
            if state.global_step > 1:  # the first step warms up
                self._since_log.append(now - self._tick)
        self._tick = now

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if not self._since_log or not state.is_world_process_zero or not state.log_history:
            return
        measured = statistics.median(self._since_log)
        self._since_log = []
        peak = self._peak_bytes()
        predicted = self.run.predicted
        entry = {
            "plan/step_time_s": measured,
            "plan/peak_memory_bytes": peak,
            "plan/predicted_step_time_s": predicted.step_time_s,
            "plan/predicted_peak_memory_bytes": predicted.peak_memory_bytes,
        }
        state.log_history[-1].update(entry)
        self.say(self._line(state.global_step, measured, peak))

    def _peak_bytes(self) -> int:
        if self._on_gpu:
            import torch

            return int(torch.cuda.max_memory_allocated())
        return peak_rss_bytes()

    def _line(self, step: int, measured: float, peak: int) -> str:
        predicted = self.run.predicted
        time_part = f"step {step}: {measured:.3g} s/step"
        if not self._on_gpu:
            rss = f"host peak RSS {peak / GIB:.2f} GiB"
            # A `--gpu cpu` plan predicts these processes' step time (the runner's rule, step_time_comparable).
            if self.plan.cluster.gpu.name != "cpu" or not predicted.step_time_s or not self._runs_the_plan:
                return f"{time_part}, {rss} (CPU processes: the plan's GPU predictions are not compared)"
            return f"{time_part}{self._versus(measured)}; {rss} (CPU processes: not compared with a GPU estimate)"
        if predicted.step_time_s:
            time_part += self._versus(measured)
        memory_part = f"peak memory {peak / GIB:.2f} GiB"
        if predicted.peak_memory_bytes:
            memory_part += (
                f" vs predicted {predicted.peak_memory_bytes / GIB:.2f} GiB ({predicted.memory_source or 'formula'})"
            )
        return f"{time_part}; {memory_part}"

    def _versus(self, measured: float) -> str:
        predicted = self.run.predicted
        assert predicted.step_time_s
        return (
            f" vs predicted {predicted.step_time_s:.3g} ({measured / predicted.step_time_s - 1:+.0%}; "
            f"{predicted.throughput_source or 'formula'})"
        )

    # 3. the record
    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        median = self.step_times.median()
        if not self.record or median is None or not state.is_world_process_zero:
            return
        from backends.runner.summary import record, step_time_comparable
        from backends.runner.world import fit_to_world

        run, _ = fit_to_world(self.run, args.world_size, tiny=False)  # the world the Trainer ran on
        run = run.model_copy(
            update={
                "micro_batch": args.per_device_train_batch_size,
                "grad_accum": args.gradient_accumulation_steps,
                "device": "cuda" if self._on_gpu else "cpu",  # where it ran, as the runner's record says
            }
        )
        # As the runner's record: the prediction goes beside the measurement when the step is the plan's, on
        # GPUs or on the CPU processes a `--gpu cpu` plan predicts (calibration learns from the pair). A Trainer
        # that ran another precision, strategy, stage, offload or checkpointing (on_train_begin) ran another step.
        step_comparable = self._runs_the_plan and step_time_comparable(self.plan, run, tiny=False)
        summary = {
            "median_step_time_s": median,
            "step_time_spread_s": self.step_times.spread(),
            "steps": state.global_step,
            "tokens_per_s": args.per_device_train_batch_size
            * args.gradient_accumulation_steps
            * args.world_size
            * self.run.seq_len
            / median,
            "peak_memory_per_rank_bytes": [self._peak_bytes()],  # the main process's
            "comparable_to_prediction": self._on_gpu and step_comparable,
            "step_time_comparable": step_comparable,
            "tiny": False,
        }
        self.record_id = record(self.plan, self.plan.config.strategy.value, run, summary, self.db, runner="hf-trainer")
        self.say(f"recorded run {self.record_id[:12]} in the benchmark database")
