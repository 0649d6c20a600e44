"""A stop signal mid-run checkpoints before the run ends: SLURM and Kubernetes preemption send SIGTERM with a
grace period (torchrun forwards it to every rank and waits 30 s before SIGKILL), and Ctrl-C sends SIGINT.

While the steps run, the signal handler (status.py) only notes the signal. At each step boundary the ranks
agree whether any of them got one (one all_reduce MAX of a single integer: a rank that received it a moment
later, or not at all, stops at the same step), save that step's checkpoint collectively (also under
--save-every 0), and raise Interrupted: run_status.json says "interrupted" and names the checkpoint, and the
next `train` resumes at the step after it. A tune's trial (--steps-only) keeps no checkpoint; it only stops.
The HF Trainer door (--trainer) runs the Trainer's own loop: the same vote, at the end of each of its steps
(StopOnSignal), has the Trainer save that step's checkpoint (checkpoints-trainer/) and stop, and the door then
raises Interrupted as the runner's loop does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from backends.runner.status import Interrupted, defer_stop_signals, note_stop_signal, stop_signal_received


@contextmanager
def signals_at_step_boundaries(*, defer: bool = True) -> Iterator[None]:
    """Around the steps: a signal waits for the step boundary (save_if_signalled) instead of raising mid-step.
    defer False: the steps defer it once they begin (StopOnSignal, when the Trainer's set-up and resume are done);
    a signal before that raises at once, as during the runner's own set-up."""
    defer_stop_signals(defer)
    try:
        yield
    finally:
        defer_stop_signals(False)
    signum = stop_signal_received()
    if signum is not None:  # came after the last boundary's check: stop now, as before the deferral
        raise Interrupted(signum)


def agreed_signal(device: Any) -> int | None:
    """The stop signal any rank received (the highest number: SIGTERM over SIGINT), the same on every rank."""
    import torch
    import torch.distributed as dist

    mine = stop_signal_received() or 0
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        flag = torch.tensor([mine], dtype=torch.int64, device=device)  # NCCL reduces on the GPU, gloo on the CPU
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        mine = int(flag.item())
    return mine or None


def signal_to_stop(device: Any) -> int | None:
    """At a step boundary: the stop signal the ranks agree on (agreed_signal), noted as this rank's own, or None."""
    signum = agreed_signal(device)
    if signum is not None:
        note_stop_signal(signum)  # still deferred: torchrun forwards the signal again, and the save must finish
    return signum


def save_if_signalled(session: Any) -> None:
    """At a step boundary of `session` (loop.RunSession): when a rank got a stop signal, every rank saves this
    step's checkpoint and raises Interrupted (run.py exits 128 + the signal: 130 SIGINT, 143 SIGTERM)."""
    signum = signal_to_stop(session.adapter.device)
    if signum is None:
        return
    if not session.args.steps_only:
        session.save(session.step)
    raise Interrupted(signum)


def stop_on_signal_callback() -> Any:
    """The Trainer's side of the vote: a TrainerCallback that defers the stop signals once the Trainer's steps begin
    and, at the end of each step, when a rank got one, has the Trainer save that step's checkpoint (also under
    --save-every 0) and stop, before the step's own evaluation (the Trainer then returns: the door raises
    Interrupted on leaving signals_at_step_boundaries)."""
    from transformers import TrainerCallback

    class StopOnSignal(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            defer_stop_signals(True)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if signal_to_stop(args.device) is not None:
                control.should_save = True
                control.should_training_stop = True
                control.should_evaluate = False

    return StopOnSignal()
