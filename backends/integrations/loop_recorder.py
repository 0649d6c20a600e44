"""`PlanRecorder(plan)`: a training loop of your own (a DeepSpeed script, a plain PyTorch loop) measured against
its plan and recorded, as PlanCallback does the HF Trainer's run (docs/integrations.md).

    recorder = PlanRecorder("runs/x")       # on every rank, before the first step
    for batch in loader:
        ...                                  # forward, backward, optimizer step
        recorder.step()                      # after each optimizer step (not each micro-batch)
    recorder.finish()                        # on every rank; the main process stores the run

Every `log_every` steps the main process says the measured step time beside the plan's prediction; finish()
stores the run in the benchmark database (runner "own-loop"; `record=False` or HARDWARE_SELECTOR_RECORD=0 opt
out). The loop is taken to run the plan's step when its batch split is the plan's (finish's `micro_batch` and
`grad_accum`, default the plan's, on the world torch.distributed has): the recorder cannot see the loop's
precision or checkpointing, so a loop that changes those should pass record=False or another plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backends.integrations.plan_check import batch_differences
from backends.integrations.plan_measure import PlanMeasurement
from planner.plan import Plan


def _rank_and_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class PlanRecorder(PlanMeasurement):
    def __init__(
        self,
        plan: Plan | str | Path,
        *,
        record: bool | None = None,
        db: str | Path | None = None,
        say: Any = print,
        log_every: int = 10,
    ) -> None:
        import torch

        super().__init__(plan, record=record, db=db, say=say)
        self.log_every = max(int(log_every), 1)
        self.steps = 0
        self.started(on_gpu=torch.cuda.is_available())

    def step(self) -> None:
        """One optimizer step has ended."""
        self.steps += 1
        self.step_ended(self.steps)
        if self.steps % self.log_every == 0 and _rank_and_world()[0] == 0:
            self.logged(self.steps)

    def finish(self, *, micro_batch: int | None = None, grad_accum: int | None = None) -> str | None:
        """Store the run (main process only); returns its record id, or None when nothing was recorded."""
        rank, world = _rank_and_world()
        micro = micro_batch or self.run.micro_batch
        accum = grad_accum or self.run.grad_accum
        self.runs_the_plan = not batch_differences(self.run, micro=micro, accum=accum, world=world)
        if rank == 0:
            self.finished(world_size=world, micro_batch=micro, grad_accum=accum, steps=self.steps, runner="own-loop")
        return self.record_id
