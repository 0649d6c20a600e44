"""`PlanMonitor(plan)`: a Lightning run measured against its plan and recorded, as PlanCallback does the Trainer's.

    trainer = L.Trainer(**plan_trainer_kwargs("runs/x"), max_steps=100)   # PlanMonitor is among its callbacks

At the start of fit it notes whether the Trainer runs the plan's own step (micro-batch from the DataLoader,
accumulation, world size and precision: plan_check.lightning_differences); every optimizer step's wall
time is kept (an optimizer step ends when `trainer.global_step` moves); every `log_every_n_steps` steps the
measured step time and peak memory go beside the plan's predictions, in one line on the main process and to the
Trainer's logger (keys `plan/...`); at the end the run is stored in the benchmark database (runner
"lightning"), where `plan` calibrates from it; `record=False` opts out. The comparison and the record are
plan_measure.py's, shared with the HF Trainer's callback (docs/integrations.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError:  # an optional extra: say which
    from planner.errors import UserInputError as _Missing

    raise _Missing("PlanMonitor needs Lightning: pip install 'hardware-selector[lightning]'") from None

from backends.integrations.plan_check import lightning_differences
from backends.integrations.plan_measure import PlanMeasurement
from planner.plan import Plan


class PlanMonitor(PlanMeasurement, pl.Callback):
    def __init__(
        self, plan: Plan | str | Path, *, record: bool | None = None, db: str | Path | None = None, say: Any = print
    ) -> None:
        super().__init__(plan, record=record, db=db, say=say)
        self._last_step = 0

    def _micro_batch(self, trainer: pl.Trainer) -> int:
        """The DataLoader's batch size (the plan's micro-batch when the loader does not say, e.g. a sampler)."""
        size = getattr(trainer.train_dataloader, "batch_size", None)
        return size if isinstance(size, int) else self.run.micro_batch

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        differences = lightning_differences(trainer, self.run, micro=self._micro_batch(trainer))
        self.runs_the_plan = not differences
        if differences and trainer.is_global_zero:
            self.say(f"warning: the Lightning Trainer does not run the plan: {'; '.join(differences)}; "
                     "its step times are not compared with the plan's")  # fmt: skip
        self._last_step = trainer.global_step
        self.started(on_gpu=trainer.strategy.root_device.type == "cuda")

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if trainer.global_step == self._last_step:
            return  # a micro-batch inside an accumulation: the optimizer step has not ended
        self._last_step = trainer.global_step
        self.step_ended(trainer.global_step)
        if trainer.is_global_zero and trainer.global_step % max(trainer.log_every_n_steps, 1) == 0:
            entry = self.logged(trainer.global_step)
            if entry is not None and trainer.logger is not None:
                trainer.logger.log_metrics({k: v for k, v in entry.items() if v is not None}, step=trainer.global_step)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self.finished(world_size=trainer.world_size, micro_batch=self._micro_batch(trainer),
                          grad_accum=trainer.accumulate_grad_batches, steps=trainer.global_step,
                          runner="lightning")  # fmt: skip
