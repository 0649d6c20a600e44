"""run_status.json (rank 0): what a run is doing, for `hardware-selector watch` and for scripts.

    {"state": "running" | "finished" | "stopped" | "interrupted" | "failed", "step": .., "total_steps": ..,
     "started_at": unix time, "updated_at": .., "strategy": .., "model": .., "world_size": .., "message": ..}

Written atomically at the start, after every checkpoint and at the end, so a
reader never sees half a file. metrics.jsonl carries the per-step detail.
A run stopped by SIGTERM (torchrun stopping its ranks, a scheduler's preemption, `kill`) or SIGINT (Ctrl-C)
ends "interrupted": the signal raises Interrupted in the main thread, and the loop records it on its way out,
instead of the file saying "running" for ever.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.errors import UserInputError
from planner.files import write_json_atomic

STATUS_FILE = "run_status.json"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_stop_signal: list[int] = []  # the stop signal this process received, if any
_deferred: list[bool] = []  # non-empty while the steps run: a signal is only noted, acted on at a step boundary


class Interrupted(BaseException):
    """A stop signal reached the run (a BaseException, as KeyboardInterrupt: no `except Exception` keeps going)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def interrupt_on_stop_signals() -> None:
    """SIGTERM and SIGINT raise Interrupted in the main thread, so the run can record how it ended."""

    def interrupt(signum: int, frame: object) -> None:
        _stop_signal.append(signum)
        if not _deferred:  # between steps the ranks agree and checkpoint first (runner/graceful_stop.py)
            raise Interrupted(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, interrupt)


def defer_stop_signals(deferred: bool) -> None:
    """While deferred, a stop signal is noted (stop_signal_received) instead of raising mid-step."""
    _deferred[:] = [True] if deferred else []


def note_stop_signal(signum: int) -> None:
    """A peer's signal, agreed at a step boundary, counts as this rank's own (it records "interrupted")."""
    if not _stop_signal:
        _stop_signal.append(signum)


def stop_signal_received() -> int | None:
    """The stop signal this process received, also when what ended the run was a peer dying of the same signal
    (a collective that failed before this process's own handler ran)."""
    return _stop_signal[0] if _stop_signal else None


TRAIN_COMMAND = "hardware-selector train"  # what resumes a run, as the messages say it (the HF Trainer door: its own)


class RunStatus:
    def __init__(self, run_dir: Path, *, enabled: bool, command: str = TRAIN_COMMAND, **facts: Any):
        self.path = run_dir / STATUS_FILE
        self.enabled = enabled
        self.command = command  # the one that resumes this run: `train`, or `train --trainer`
        self.document: dict[str, Any] = {"state": "running", "started_at": time.time(), **facts}

    @classmethod
    def of_run(
        cls, run_dir: Path, run: Any, *, rank: int, steps: int, strategy: str, world: int, step: int,
        resumed_from: str | None, command: str = TRAIN_COMMAND,
    ) -> RunStatus:  # fmt: skip
        """The status file of a run starting at `step` (either door's), written once now."""
        status = cls(
            run_dir,
            enabled=rank == 0,
            command=command,
            total_steps=steps,
            strategy=strategy,
            model=run.model.name,
            world_size=world,
            global_batch=run.global_batch,
            seq_len=run.seq_len,
            **({"checkpoint": resumed_from} if resumed_from else {}),
        )
        status.update(step=step)
        return status

    def update(self, **changes: Any) -> None:
        if not self.enabled:
            return
        self.document.update(changes, updated_at=time.time())
        write_json_atomic(self.path, self.document, indent=1)

    def record_end(self, failure: BaseException, step: int) -> None:
        """How a run that raised ended: "interrupted" when a stop signal came (whatever exception it caused: a
        peer that died of it first fails this rank's collective), else "failed" with the exception."""
        signum = stop_signal_received()
        if signum is None:
            self.update(state="failed", step=step, message=f"{type(failure).__name__}: {failure}"[:500])
            return
        checkpoint = self.document.get("checkpoint")  # the newest this run saved or resumed from
        then = where_next(checkpoint, self.command)
        # saved on the signal (graceful_stop.py): the runner's global_step<N>, or the HF Trainer's checkpoint-<N>
        if checkpoint and Path(checkpoint).name in (f"global_step{step}", f"checkpoint-{step}"):
            then = f"checkpoint saved at step {step}: `{self.command}` resumes from {checkpoint}"
        self.update(state="interrupted", step=step, message=f"{signal.Signals(signum).name} at step {step}; {then}")


def where_next(checkpoint: str | None, command: str = TRAIN_COMMAND) -> str:
    """Where the next `train` (`command`) of an interrupted run starts."""
    if checkpoint:
        return f"`{command}` resumes from {checkpoint}"
    return f"no checkpoint was saved yet: `{command}` starts again at step 1 (--save-every N)"


def next_start(run_dir: Path, *, tiny: bool, resume: bool = True) -> str:
    """Where the next `train` of this folder starts, chosen as its ranks will choose (checkpoints.
    chosen_checkpoint: a damaged newest checkpoint is passed over for an older intact one), said as where_next
    says it; the ranks' own refusal when no checkpoint is intact. `resume` False (--no-resume): afresh."""
    from backends.runner.checkpoints import chosen_checkpoint

    if not resume:
        return where_next(None)
    try:
        choice, _ = chosen_checkpoint(run_dir / "checkpoints", tiny=tiny, report=False)
    except UserInputError as refusal:
        return str(refusal)
    return where_next(str(choice) if choice is not None else None)


def record_stopped_launch(
    run_dir: Path, signum: int, since: float, then: Callable[[], str], command: str = TRAIN_COMMAND
) -> str | None:
    """For the launching process (`train`) that a stop signal reached at or after `since`: the interrupted
    message, with run_status.json saying so; None when the ranks recorded an ending of their own first.

    The ranks record "interrupted" only once their loop is set up; a signal during their start-up (imports,
    tokenizing) would leave the file missing, or holding an earlier run's ending. `then`: where the next
    `train` starts (next_start), asked only when the ranks did not get as far as saying (it reads checkpoints);
    `command`: the one that resumes the run (where_next)."""
    try:
        document = read_status(run_dir)
    except UserInputError:  # damaged: this launch's own account replaces it
        document = {}
    updated = document.get("updated_at")
    if not isinstance(updated, (int, float)) or updated < since:
        document = {"started_at": since}  # an earlier run's, or none: nothing of it describes this launch
    elif document["state"] == "interrupted":
        return str(document.get("message", ""))
    elif document["state"] in ("failed", "stopped"):  # the ranks' own ending came first, and stands
        return None
    document.pop("state", None)
    step = document.get("step")
    # A checkpoint this launch's ranks recorded they saved or resumed from was sealed or verified by them.
    said = where_next(document["checkpoint"], command) if document.get("checkpoint") else then()
    when = f"at step {step}" if step is not None else "before the ranks began training"
    status = RunStatus(run_dir, enabled=True, **document)
    status.update(state="interrupted", message=f"{signal.Signals(signum).name} {when}; {said}")
    return str(status.document["message"])


STATES = ("running", "finished", "stopped", "interrupted", "failed")
COUNTS = ("step", "total_steps", "world_size", "global_batch", "seq_len")  # whole numbers, 0 or more
TEXTS = ("message", "strategy", "model")


def read_status(run_dir: Path) -> dict[str, Any]:
    """The run's status; {} before the run has started. A file that is not what the runner writes (edited by
    hand, or by another program) is a UserInputError saying so, rather than a view made of its nonsense."""
    path = run_dir / STATUS_FILE
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:  # unreadable, not UTF-8, not JSON
        problem = "not JSON" if isinstance(error, json.JSONDecodeError) else type(error).__name__
        raise _damaged(path, problem) from None
    problem = _status_problem(document)
    if problem:
        raise _damaged(path, problem)
    return document


def _status_problem(document: Any) -> str | None:
    if not isinstance(document, dict):
        return f"a JSON {type(document).__name__}, not an object"
    if document.get("state") not in STATES:
        return f"state {document.get('state')!r} is none of {', '.join(STATES)}"
    for key in COUNTS:
        value = document.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            return f"{key} {value!r} is not a whole number"
    for key in ("started_at", "updated_at"):
        value = document.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            return f"{key} {value!r} is not a time"
    wrong = next((key for key in TEXTS if document.get(key) is not None and not isinstance(document[key], str)), None)
    return f"{wrong} {document[wrong]!r} is not text" if wrong else None


def _damaged(path: Path, problem: str) -> UserInputError:
    return UserInputError(
        f"{path} is damaged ({problem}): the runner did not write it so; delete it (the run's next start "
        "writes it again), and metrics.jsonl still holds every step"
    )
