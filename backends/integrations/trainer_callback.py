"""`PlanCallback(plan)`: the HF Trainer checked against a plan, measured against it, and recorded.

    from hardware_selector import training_arguments
    from hardware_selector.integrations import PlanCallback

    args = training_arguments("runs/x", "out")          # or your own TrainingArguments
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[PlanCallback("runs/x")])

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
3. The run is stored in the benchmark database at on_train_end
   (benchmarks_db), where calibration learns from it, as `train` stores its
   runs (record=False opts out, as `train --no-record`, and
   HARDWARE_SELECTOR_RECORD=0 for every run); beside the plan's
   step-time prediction when the Trainer ran the plan's own step, on GPUs or
   on the CPU processes a `--gpu cpu` plan predicts (the runner's rule).
The timing, the comparison and the record are plan_measure.py's, shared with
Lightning's PlanMonitor.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from backends.integrations.plan_check import RANKS_DIFFER, mismatch_line, torchrun_launch, trainer_differences
from backends.integrations.plan_measure import PlanMeasurement
from backends.mpi.environment import launched_world_size
from planner.contract.choices import Strategy
from planner.errors import UserInputError
from planner.plan import Plan


class PlanMismatch(UserInputError):
    """The Trainer does not run the plan it was given (one line naming each difference)."""


class PlanCallback(PlanMeasurement, TrainerCallback):
    def __init__(
        self,
        plan: Plan | str | Path,
        *,
        strict: bool = True,
        record: bool | None = None,
        db: str | Path | None = None,
        say: Any = print,
    ):
        super().__init__(plan, record=record, db=db, say=say)
        self.strict = strict
        self._refuse_fsdp_on_one_process()

    def _refuse_fsdp_on_one_process(self) -> None:
        """An FSDP plan on one process: the Trainer refuses it in its constructor, before on_train_begin, with
        "ValueError: Using fsdp only works in distributed training" and a traceback (a new user's audit,
        2026-11-30). The callback is built before the Trainer, so it says the launch the plan needs first."""
        world = launched_world_size(os.environ)  # torchrun's count, or an MPI launcher's
        if not self.strict or world != 1 or self.run.world_size == 1 or self.plan.config.strategy is not Strategy.FSDP:
            return
        ranks = (
            f"{RANKS_DIFFER}{self.run.world_size} ranks, this run 1: {torchrun_launch(self.run)} (or plan again for 1)"
        )
        raise PlanMismatch(mismatch_line(f"the Trainer does not run the plan for {self.plan.model.name}", [ranks], ""))

    # 1. the check
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import torch

        differences = trainer_differences(args, self.plan, self.run, kwargs.get("model"))
        self.runs_the_plan = not differences
        if differences:
            line = mismatch_line(
                f"the Trainer does not run the plan for {self.plan.model.name}",
                differences,
                "build the arguments with training_arguments(plan, ...) or plan again",
            )
            if self.strict:
                raise PlanMismatch(line)
            if state.is_world_process_zero:
                self.say(f"warning: {line}")
        self.started(on_gpu=torch.cuda.is_available() and not getattr(args, "use_cpu", False))

    # 2. measured vs predicted
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.step_ended(state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if not self.since_log or not state.is_world_process_zero or not state.log_history:
            return
        entry = self.logged(state.global_step)
        if entry is not None:
            state.log_history[-1].update(entry)

    # 3. the record
    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self.finished(world_size=args.world_size, micro_batch=args.per_device_train_batch_size,
                          grad_accum=args.gradient_accumulation_steps, steps=state.global_step,
                          runner="hf-trainer")  # fmt: skip
