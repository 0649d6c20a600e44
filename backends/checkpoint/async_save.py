"""checkpoint.async_save: save_checkpoint returns once the state is copied; the shards are written behind training.

save() copies this rank's shards into CPU memory before it returns (a copy
even of CPU tensors, so the steps that follow cannot change what is written;
SnapshotStager, since DCP's default stager cannot copy the DTensors we build
over our own shards), writes the small files (RNG, engine_state.json) at once,
as they are at the save, and leaves the shard write to a background thread. Nothing
is sealed then: the folder stays .partial-<tag> (never a load candidate).

wait() is collective and is called by every rank at the same point: the next
save_checkpoint, load_checkpoint, export, engine.close() or the end of
backends.run. Each rank waits for its own write, the ranks exchange their
outcomes, and only when every write succeeded does rank 0 seal (manifest,
rename, latest, keep-last-N). A failed write anywhere removes the partial
folder and raises AsyncSaveError on every rank.

Only one save is in flight. DCP's background save runs collectives (plan and
metadata exchange); they go over a gloo group of their own so that they never
interleave with training's collectives on the main thread.
"""

from __future__ import annotations

import atexit
import shutil
import warnings
import weakref
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.checkpoint.save import begin_folder, seal, write_resume_state
from backends.checkpoint.shards import sharded_views
from backends.ranks import distributed, everyones, rank


class AsyncSaveError(RuntimeError):
    """A background checkpoint write failed; its checkpoint was discarded, the previous ones are intact."""


@dataclass
class PendingSave:
    write: Future
    save_dir: Path
    partial: Path
    tag: str
    keep_last: int


def _outcome(write: Future) -> BaseException | None:
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        write.result()
    except (Exception, CheckpointException) as failure:  # DCP's is a BaseException; reported to every rank, then raised
        return failure
    return None


def _copy_to_host(value: Any) -> Any:
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor):
        local = value.to_local().detach().to("cpu", copy=True)
        return DTensor.from_local(local, value.device_mesh, value.placements, shape=value.shape, stride=value.stride())
    return value.detach().to("cpu", copy=True)


def _snapshot_stager() -> Any:
    from torch.distributed.checkpoint.staging import AsyncStager

    class SnapshotStager(AsyncStager):
        """Stages by copying every tensor to host memory, within async_save, before it returns."""

        _synchronize_after_execute = False

        def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
            return {key: _copy_to_host(value) for key, value in state_dict.items()}

        def synchronize_staging(self) -> None:
            pass  # stage() is synchronous: nothing to wait for

        def close(self) -> None:
            pass  # holds nothing between saves

    return SnapshotStager()


def _describe(failure: BaseException) -> str:
    """One line: DCP wraps each rank's exception (with a traceback) in a CheckpointException; name the causes."""
    from torch.distributed.checkpoint.api import CheckpointException

    causes = (
        [cause for cause, _ in failure.failures.values()] if isinstance(failure, CheckpointException) else [failure]
    )
    return "; ".join(f"{type(cause).__name__}: {cause}" for cause in causes)


class AsyncCheckpointer:
    """One per engine: its gloo group for DCP's background collectives and the save in flight."""

    def __init__(self) -> None:
        self._group: Any = None
        self._pending: PendingSave | None = None
        _LIVE.add(self)

    def _writer_group(self) -> Any:
        if not distributed():
            return None
        if self._group is None:
            import torch.distributed as dist

            self._group = dist.new_group(backend="gloo")  # collective: every rank is in save() here
        return self._group

    def save(
        self, engine: Any, save_dir: str | Path, *, tag: str | None = None, client_state: dict | None = None
    ) -> str:
        import torch.distributed.checkpoint as dcp

        self.wait()
        save_dir = Path(save_dir)
        tag, partial = begin_folder(engine, save_dir, tag)
        write = dcp.async_save(
            sharded_views(engine),
            checkpoint_id=str(partial / "shards"),
            process_group=self._writer_group(),
            async_stager=_snapshot_stager(),
            no_dist=not distributed(),
        )
        write_resume_state(engine, partial, tag, client_state)
        self._pending = PendingSave(write, save_dir, partial, tag, engine.config.hardware_selector.checkpoint.keep_last)
        return str(save_dir / tag)

    def wait(self) -> str | None:
        """Collective. Seals the save in flight and returns its folder; None when there was none."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        local = _outcome(pending.write)
        failures = [
            (index, message)
            for index, message in enumerate(everyones(_describe(local) if local else None))
            if message is not None
        ]
        if not failures:
            return seal(pending.save_dir, pending.partial, pending.tag, pending.keep_last)
        if rank() == 0:
            shutil.rmtree(pending.partial, ignore_errors=True)
        failed_rank, message = failures[0]
        raise AsyncSaveError(
            f"checkpoint {pending.tag} was not saved: the background write failed on rank "
            f"{failed_rank}: {message}; {pending.save_dir} still holds the checkpoints saved before it"
        ) from local

    def wait_at_exit(self) -> None:
        """At interpreter exit: one process can still seal; ranks cannot agree any more, so theirs stays partial."""
        if self._pending is None:
            return
        if not distributed():
            self.wait()
            return
        pending, self._pending = self._pending, None
        _outcome(pending.write)  # let this rank's files finish; never sealed without the others' outcome
        warnings.warn(
            f"async checkpoint {pending.tag} was still in flight at exit and is left unsealed in "
            f"{pending.partial}; call engine.close() (every rank) before the process group ends",
            stacklevel=1,
        )


_LIVE: weakref.WeakSet[AsyncCheckpointer] = weakref.WeakSet()


@atexit.register
def _finish_saves_in_flight() -> None:
    for checkpointer in list(_LIVE):
        checkpointer.wait_at_exit()
