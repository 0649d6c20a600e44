"""A process started by mpiexec/mpirun: its rank, world size and local rank from MPI's environment, as torchrun's.

`mpiexec -n N python -m backends.run --plan DIR` starts N ranks that torchrun did not number. Before anything
reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR or MASTER_PORT (the runner, the process group's
env:// rendezvous, DeepSpeed, accelerate), adopt_mpi_environment() sets them from the launcher's own variables:
Open MPI's OMPI_COMM_WORLD_*, MPICH's and Intel MPI's Hydra (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID,
MPI_LOCALNRANKS), MVAPICH's MV2_COMM_WORLD_*; where they are incomplete (PMIx under srun), mpi4py asks MPI
itself. The rendezvous is MASTER_ADDR/MASTER_PORT when given, else the loopback when every rank is on this host,
else rank 0's host broadcast by mpi4py. MPI only numbers the ranks: the collectives stay on gloo or NCCL
(docs/running.md, "MPI").
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import asdict, dataclass

from planner.errors import UserInputError

DEFAULT_MASTER_PORT = 29500  # launch.sh's and torchrun's

# Each launcher's variables: (rank, world size, local rank, local world size).
MPI_VARIABLES: dict[str, tuple[str, str, str, str]] = {
    "Open MPI": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE"),
    "MPICH or Intel MPI": ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    "MVAPICH": ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
                "MV2_COMM_WORLD_LOCAL_SIZE"),
}  # fmt: skip
# Signs of a process started by an MPI launcher whose variables above are incomplete: mpi4py asks MPI.
# Only variables a launcher sets for the processes it starts: none that a shell profile sets (Intel's setvars.sh).
MPI_MARKERS = ("PMIX_RANK", "PMI_RANK", "PMI_FD", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class MpiWorld:
    """This rank's place in an MPI launch, and the rendezvous every rank agrees on."""

    source: str  # which launcher's variables, or "mpi4py"
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int

    def torchrun_variables(self) -> dict[str, str]:
        values = (self.rank, self.world_size, self.local_rank, self.local_world_size, self.master_addr,
                  self.master_port)  # fmt: skip
        return dict(zip(TORCHRUN_VARIABLES, map(str, values)))


@dataclass(frozen=True)
class _Counts:
    source: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


class Mpi4pyMissing(UserInputError):
    """MPI's variables were not enough and mpi4py, which would ask MPI, is not installed."""


def read_mpi_world(environ: Mapping[str, str], ask_mpi: Callable[[], object] | None = None) -> MpiWorld | None:
    """This process's MpiWorld, or None when torchrun (or another launcher that sets RANK) numbered it, or no MPI
    launcher started it. `ask_mpi` returns mpi4py's MPI module (tests give their own)."""
    if "RANK" in environ:
        return None
    ask = ask_mpi or _import_mpi
    mpi = None
    counts = _counts_from(environ)
    if counts is None:
        if not any(marker in environ for marker in MPI_MARKERS):
            return None
        mpi = ask()
        counts = _counts_from_mpi(mpi)
    addr, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")
    if addr is None and counts.local_world_size == counts.world_size:
        addr = "127.0.0.1"  # every rank is on this host
    if addr is None and mpi is None:  # several hosts: only MPI knows rank 0's
        try:
            mpi = ask()
        except Mpi4pyMissing:
            raise UserInputError(
                f"{counts.world_size} MPI ranks over several hosts and no MASTER_ADDR: pass rank 0's host "
                "(Open MPI: -x MASTER_ADDR=HOST; MPICH and Intel MPI: -genv MASTER_ADDR HOST), or install mpi4py "
                "(pip install 'hardware-selector[mpi]') to broadcast it"
            ) from None
        _check_same_world(mpi, counts)
    if mpi is not None:
        addr, port = _broadcast_rendezvous(mpi, addr, port)
    return MpiWorld(**asdict(counts), master_addr=addr or "127.0.0.1", master_port=int(port or DEFAULT_MASTER_PORT))


def adopt_mpi_environment(environ: MutableMapping[str, str] | None = None) -> MpiWorld | None:
    """Set torchrun's variables from MPI's in `environ` (os.environ); a no-op when RANK is set or MPI is absent."""
    target = os.environ if environ is None else environ
    world = read_mpi_world(target)
    if world is not None:
        target.update(world.torchrun_variables())
    return world


def launched_world_size(environ: Mapping[str, str]) -> int | None:
    """The processes this launch started, from its launcher's variables: torchrun's WORLD_SIZE, else an MPI
    launcher's own count (read before the runner adopts them, as a Trainer script under `LAUNCHER=mpirun` is); 1
    without a launcher; None when they are no integers (the one that reads them says so)."""
    try:
        if "WORLD_SIZE" in environ:
            return int(environ["WORLD_SIZE"])
        counts = _counts_from(environ)
    except (ValueError, UserInputError):
        return None
    return counts.world_size if counts is not None else 1


def _counts_from(environ: Mapping[str, str]) -> _Counts | None:
    for source, names in MPI_VARIABLES.items():
        values = [environ[name] for name in names if name in environ]
        if len(values) == len(names):
            try:
                rank, size, local_rank, local_size = (int(value) for value in values)
            except ValueError:
                raise UserInputError(f"{source}'s {', '.join(names)} must be integers, not {values}") from None
            return _Counts(source, rank, size, local_rank, local_size)
    return None


def _import_mpi():
    try:
        from mpi4py import MPI
    except ImportError:
        raise Mpi4pyMissing(
            "this process was started by an MPI launcher whose variables do not give its rank and local rank; "
            "install mpi4py (pip install 'hardware-selector[mpi]') or start it with mpiexec of Open MPI, MPICH or "
            "Intel MPI"
        ) from None
    return MPI


def _counts_from_mpi(mpi) -> _Counts:
    world = mpi.COMM_WORLD
    local = world.Split_type(mpi.COMM_TYPE_SHARED)  # the ranks that share this host's memory
    return _Counts("mpi4py", world.Get_rank(), world.Get_size(), local.Get_rank(), local.Get_size())


def _check_same_world(mpi, counts: _Counts) -> None:
    """mpi4py built for another MPI than the launcher's starts each rank as a world of its own: it could not
    agree on anything."""
    size = mpi.COMM_WORLD.Get_size()
    if size != counts.world_size:
        raise UserInputError(
            f"mpi4py sees a world of {size} where {counts.source} started {counts.world_size} ranks: it was built "
            "for another MPI; start the ranks with the mpiexec it was built with, or pass MASTER_ADDR"
        )


def _broadcast_rendezvous(mpi, addr: str | None, port: str | None) -> tuple[str, str]:
    """Rank 0's host name and a free port on it (for whichever of the two is not given), the same on every rank.
    MPI is finalised afterwards: the runner needs nothing more of it, and Open MPI's mpirun reports a rank that
    ends without MPI_Finalize as failed."""
    world = mpi.COMM_WORLD
    proposal = None
    if world.Get_rank() == 0:
        proposal = (addr or socket.gethostname(), port or str(_free_port()))
    agreed = world.bcast(proposal, root=0)
    mpi.Finalize()
    return agreed


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]
