"""The device mesh of one run's layout, built from the planner's one layout value, ParallelDims.

ParallelDims (planner/contract/layout.py) is pure, validated data; this file
turns it into torch process groups. The layout is a value passed around (no
module-level process-group singletons), so two layouts can coexist in one
process, for instance a sharded model next to its single-process reference
in a test.

Rank order is ("pp", "dp", "cp", "tp") with tp innermost: the ranks of one
tensor-parallel group are consecutive, hence on one node, because TP
communicates every layer and must not cross the slower inter-node link; the
context-parallel ranks of one replica (each a tp group) come next, as they
exchange keys and values every layer. The cp ranks share their replica's
parameters, so ZeRO runs over dp x cp (data_parallel_group).

Expert parallelism carves its ep ranks out of dp (planner/contract/layout.py):
dp is (edp, ep) with ep innermost, the ep ranks at one tp coordinate exchange
tokens, and ZeRO runs over edp, the ranks that hold the same experts
(backends/expert_parallel/apply.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.contract.layout import ParallelDims
from planner.errors import UserInputError

MESH_DIM_NAMES = ("pp", "dp", "cp", "tp")

__all__ = ["MESH_DIM_NAMES", "ParallelDims", "ParallelGroups", "build_groups", "check_fits"]


def check_fits(dims: ParallelDims, world_size: int, gpus_per_node: int | None = None) -> None:
    """The layout must use exactly the job's ranks, and keep tensor parallelism inside a node."""
    if dims.cp > 1 and (dims.pp > 1 or dims.ep > 1):
        raise UserInputError(
            f"layout {dims.describe()}: context parallelism runs with pp 1 and ep 1 here "
            "(backends/context_parallel); use cp 1, or pp 1 and ep 1"
        )
    if dims.world_size != world_size:
        cp = f" x cp{dims.cp}" if dims.cp > 1 else ""
        raise UserInputError(
            f"layout dp{dims.dp} x tp{dims.tp} x pp{dims.pp}{cp} = {dims.world_size} ranks but the job has "
            f"{world_size}; launch {dims.world_size} ranks or change the layout"
        )
    if gpus_per_node and dims.tp > 1 and gpus_per_node % dims.tp != 0:
        raise UserInputError(
            f"tensor parallelism {dims.tp} does not fit inside a node of {gpus_per_node} devices; "
            f"use a tp that divides {gpus_per_node}"
        )


def build_groups(dims: ParallelDims, device_type: str = "cpu", gpus_per_node: int | None = None) -> ParallelGroups:
    """Create the named DeviceMesh over the running job (torch.distributed must be initialised)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if not dist.is_initialized():
        raise RuntimeError("build_groups needs torch.distributed initialised (run under torchrun)")
    check_fits(dims, dist.get_world_size(), gpus_per_node)
    if dims.ep > 1:  # dp = edp x ep, named as one dimension too (collective: every rank builds it)
        shape = (dims.pp, dims.dp // dims.ep, dims.ep, dims.cp, dims.tp)
        mesh = init_device_mesh(device_type, shape, mesh_dim_names=("pp", "edp", "ep", "cp", "tp"))
        mesh["edp", "ep"]._flatten("dp")
        return ParallelGroups(dims=dims, mesh=mesh)
    mesh = init_device_mesh(device_type, (dims.pp, dims.dp, dims.cp, dims.tp), mesh_dim_names=MESH_DIM_NAMES)
    if dims.cp > 1:
        mesh["dp", "cp"]._flatten("dp_cp")  # ZeRO's group (collective: every rank builds it)
    return ParallelGroups(dims=dims, mesh=mesh)


@dataclass
class ParallelGroups:
    """The process groups of one layout and this rank's coordinates in it."""

    dims: ParallelDims
    mesh: Any  # torch.distributed.device_mesh.DeviceMesh
    _groups: dict[str, Any] = field(default_factory=dict, repr=False)
    _ranks: dict[str, int] = field(default_factory=dict, repr=False)

    def group(self, name: str) -> Any:
        if name not in self._groups:
            self._groups[name] = self.mesh[name].get_group()  # also a flattened dimension (dp_cp)
        return self._groups[name]

    @property
    def dp_group(self) -> Any:
        return self.group("dp")

    @property
    def data_parallel_group(self) -> Any:
        """The ranks holding the same parameters, over which ZeRO shards and averages: dp, times cp; under expert
        parallelism the ranks holding the same experts (edp)."""
        if self.dims.ep > 1:
            return self.group("edp")
        return self.group("dp_cp") if self.dims.cp > 1 else self.dp_group

    @property
    def cp_group(self) -> Any:
        return self.group("cp")

    @property
    def tp_group(self) -> Any:
        return self.group("tp")

    @property
    def pp_group(self) -> Any:
        return self.group("pp")

    def local_rank(self, name: str) -> int:
        if name not in self._ranks:
            self._ranks[name] = self.mesh[name].get_local_rank()  # also a flattened dimension (dp under ep)
        return self._ranks[name]

    @property
    def dp_rank(self) -> int:
        return self.local_rank("dp")

    @property
    def cp_rank(self) -> int:
        return self.local_rank("cp")

    @property
    def tp_rank(self) -> int:
        return self.local_rank("tp")

    @property
    def pp_rank(self) -> int:
        return self.local_rank("pp")

    def global_rank_of(self, *, pp: int, dp: int, tp: int, cp: int = 0) -> int:
        """The global rank at mesh coordinates (pp, dp, cp, tp)."""
        dims = self.dims
        return int(self.mesh.mesh.reshape(dims.pp, -1, dims.cp, dims.tp)[pp, dp, cp, tp].item())

    def pp_peer(self, pp_rank: int) -> int:
        """Global rank of the pipeline stage `pp_rank` holding this rank's dp, cp and tp coordinates."""
        return self.global_rank_of(pp=pp_rank, dp=self.dp_rank, tp=self.tp_rank, cp=self.cp_rank)
