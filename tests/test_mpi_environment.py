"""Ranks started by mpiexec number themselves from MPI's environment (backends/mpi/environment.py).

The variable names are each launcher's documented ones (Open MPI's OMPI_COMM_WORLD_*, Hydra's PMI_* and
MPI_LOCAL* for MPICH and Intel MPI, MVAPICH's MV2_COMM_WORLD_*); the real MPICH of the [mpi] extra starts two ranks
that find their numbers through mpi4py, agree on a rendezvous and all-reduce over gloo. The whole runner under
mpiexec is compared with torchrun in tests/test_emit_runs.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from backends.mpi.environment import Mpi4pyMissing, adopt_mpi_environment, read_mpi_world
from planner.errors import UserInputError
from tests.distributed import cpu_env

MPIEXEC = Path(sys.executable).parent / "mpiexec"  # the [mpi] extra's MPICH, installed beside the interpreter


@pytest.mark.parametrize(
    "environ",
    [
        {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
         "OMPI_COMM_WORLD_LOCAL_SIZE": "4"},
        {"PMI_RANK": "5", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4"},
        {"MV2_COMM_WORLD_RANK": "5", "MV2_COMM_WORLD_SIZE": "8", "MV2_COMM_WORLD_LOCAL_RANK": "1",
         "MV2_COMM_WORLD_LOCAL_SIZE": "4"},
    ],
    ids=["open-mpi", "mpich-or-intel-mpi", "mvapich"],
)  # fmt: skip
def test_each_launchers_variables_become_torchruns(environ):
    environ = {**environ, "MASTER_ADDR": "node-0", "MASTER_PORT": "4242"}
    assert adopt_mpi_environment(environ) is not None
    assert {name: environ[name] for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")} == {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
    }
    assert (environ["MASTER_ADDR"], environ["MASTER_PORT"]) == ("node-0", "4242")


def test_torchrun_and_plain_processes_are_left_alone():
    torchrun = {"RANK": "1", "WORLD_SIZE": "2", "PMI_RANK": "0", "PMI_SIZE": "1"}  # torchrun under an srun with PMI
    assert adopt_mpi_environment(torchrun) is None and torchrun["RANK"] == "1"
    assert read_mpi_world({"PATH": "/usr/bin"}) is None


def test_one_host_needs_no_address():
    world = read_mpi_world({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"})
    assert (world.master_addr, world.master_port) == ("127.0.0.1", 29500)  # launch.sh's and torchrun's port


class FakeMpi:
    """mpi4py's MPI as rank 0 of `size` ranks, `local` on this host, sees it."""

    COMM_TYPE_SHARED = "shared"

    def __init__(self, size: int, local: int):
        self.COMM_WORLD = _Comm(0, size, local)
        self.finalized = False

    def Finalize(self):
        self.finalized = True


class _Comm:
    def __init__(self, rank, size, local):
        self.rank, self.size, self.local = rank, size, local

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size

    def Split_type(self, kind):
        return _Comm(self.rank, self.local, self.local)

    def bcast(self, value, root):
        return value


def test_several_hosts_take_rank_0s_address_from_mpi4py():
    mpi = FakeMpi(size=4, local=2)
    environ = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
               "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}  # fmt: skip
    world = read_mpi_world(environ, ask_mpi=lambda: mpi)
    assert world.master_addr == socket.gethostname() and 1024 <= world.master_port < 65536
    assert mpi.finalized  # Open MPI counts a rank that exits without MPI_Finalize as failed


def test_an_incomplete_environment_asks_mpi4py():
    world = read_mpi_world({"PMIX_RANK": "0"}, ask_mpi=lambda: FakeMpi(size=3, local=3))  # srun --mpi=pmix
    assert (world.source, world.rank, world.world_size, world.local_world_size) == ("mpi4py", 0, 3, 3)


def _missing():
    raise Mpi4pyMissing("no mpi4py")


def test_what_mpi_cannot_say_is_one_line():
    several_hosts = {"PMI_RANK": "0", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}
    with pytest.raises(UserInputError, match=r"^4 MPI ranks over several hosts and no MASTER_ADDR: pass rank 0's"):
        read_mpi_world(several_hosts, ask_mpi=_missing)
    with pytest.raises(UserInputError, match="mpi4py sees a world of 1 where MPICH or Intel MPI started 4 ranks"):
        read_mpi_world(several_hosts, ask_mpi=lambda: FakeMpi(size=1, local=1))  # mpi4py built for another MPI
    with pytest.raises(UserInputError, match="must be integers"):
        read_mpi_world({"PMI_RANK": "x", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"})


RANK_SCRIPT = """
import json, os
for name in ("MPI_LOCALRANKID", "MPI_LOCALNRANKS", "MASTER_ADDR", "MASTER_PORT"):
    os.environ.pop(name, None)  # as an MPI that gives no local rank: mpi4py must answer, and choose the port
from backends.mpi.environment import adopt_mpi_environment
world = adopt_mpi_environment()
import torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
print(json.dumps({"launcher_rank": int(os.environ["PMI_RANK"]), "rank": dist.get_rank(),
                  "world": dist.get_world_size(), "local_rank": int(os.environ["LOCAL_RANK"]),
                  "source": world.source, "port": world.master_port, "total": total.item()}), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_mpiexec_ranks_meet_over_gloo_through_mpi4py():
    completed = subprocess.run(
        [str(MPIEXEC), "-n", "2", sys.executable, "-c", RANK_SCRIPT],
        env=cpu_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    # mpiexec forwards each rank's stdout as it comes, so two ranks' lines can arrive without the newline between
    # them: read the JSON objects one after another rather than line by line.
    decoder, text, rows, at = json.JSONDecoder(), completed.stdout, [], 0
    while (at := text.find("{", at)) >= 0:
        row, at = decoder.raw_decode(text, at)
        rows.append(row)
    ranks = sorted(rows, key=lambda row: row["rank"])
    assert [(row["launcher_rank"], row["rank"], row["local_rank"], row["world"]) for row in ranks] == [
        (0, 0, 0, 2),
        (1, 1, 1, 2),
    ]
    assert {row["source"] for row in ranks} == {"mpi4py"} and ranks[0]["port"] == ranks[1]["port"]
    assert [row["total"] for row in ranks] == [3.0, 3.0]  # 1 + 2, all-reduced over gloo
