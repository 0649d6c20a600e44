"""Start torch.distributed in a process launched by torchrun (or mpiexec), safely across `--max-restarts`.

torchrun's agent keeps one key-value store for the whole job. A restarted
worker that calls plain init_process_group reads the previous attempt's gloo
addresses from it (same keys) and fails with "connection refused" or hangs.
Prefixing every key with the restart count gives each attempt a clean slate.
"""

from __future__ import annotations

import atexit
import os
from datetime import timedelta


def init_distributed(backend: str, timeout_minutes: float = 10) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        return
    from backends.mpi.environment import adopt_mpi_environment

    adopt_mpi_environment()  # a process mpiexec started: torchrun's variables from MPI's (a no-op otherwise)
    # A script that never destroys the group we made would leave gloo's threads to interpreter teardown,
    # which can abort the process after a run that succeeded ("terminate called without an active exception").
    atexit.register(_destroy_at_exit)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt is None or "MASTER_ADDR" not in os.environ:
        dist.init_process_group(backend, timeout=timedelta(minutes=timeout_minutes))
        return
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=timedelta(minutes=timeout_minutes),
    )
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(f"attempt{attempt}", store),
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        timeout=timedelta(minutes=timeout_minutes),
    )


def _destroy_at_exit() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()  # local: no barrier, so a peer that died cannot hang the exit


def shutdown_distributed() -> None:
    """Barrier, then destroy every process group.

    The barrier keeps a fast rank from tearing down its gloo pairs while a
    slower one is still finishing the last collective.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    dist.barrier()
    dist.destroy_process_group()


def exit_worker(code: int) -> None:
    """End a torchrun worker without interpreter finalization, once its work is written.

    Gloo's C++ threads can still hold work objects when Python tears itself
    down; destroying them then aborts the process ("terminate called without
    an active exception", SIGABRT) after a run that succeeded, and torchrun
    reports the job as failed. Every file we write is closed by now, so skip
    the finalization.
    """
    import sys

    if code == 0:
        shutdown_distributed()  # a failed rank skips the barrier: its peers may be stuck elsewhere, and the
        # launcher ends them once this process exits
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
