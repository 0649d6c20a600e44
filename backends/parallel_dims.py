"""The dp x tp x pp layout of one run, and the named device mesh it builds.

The layout is a value passed around (no module-level process-group
singletons), so two layouts can coexist in one process, for instance a
sharded model next to its single-process reference in a test.

Rank order is ("pp", "dp", "tp") with tp innermost: the ranks of one
tensor-parallel group are consecutive, hence on one node, because TP
communicates every layer and must not cross the slower inter-node link.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.errors import UserInputError

MESH_DIM_NAMES = ("pp", "dp", "tp")


@dataclass(frozen=True)
class ParallelDims:
    dp: int
    tp: int = 1
    pp: int = 1

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise UserInputError(f"layout {name}={value!r} must be a whole number >= 1")

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    @classmethod
    def from_layout(cls, layout: dict[str, Any]) -> "ParallelDims":
        """From engine.json's `hardware_selector.layout` block (or a ParallelLayout dump)."""
        return cls(
            dp=int(layout.get("data_parallel", 1)),
            tp=int(layout.get("tensor_parallel", 1)),
            pp=int(layout.get("pipeline_parallel", 1)),
        )

    def check(self, world_size: int, gpus_per_node: int | None = None) -> None:
        if self.world_size != world_size:
            raise UserInputError(
                f"layout dp{self.dp} x tp{self.tp} x pp{self.pp} = {self.world_size} ranks but the job has "
                f"{world_size}; launch {self.world_size} ranks or change the layout"
            )
        if gpus_per_node and self.tp > 1 and gpus_per_node % self.tp != 0:
            raise UserInputError(
                f"tensor parallelism {self.tp} does not fit inside a node of {gpus_per_node} devices; "
                f"use a tp that divides {gpus_per_node}"
            )

    def build(self, device_type: str = "cpu", gpus_per_node: int | None = None) -> "ParallelGroups":
        """Create the named DeviceMesh over the running job (torch.distributed must be initialised)."""
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        if not dist.is_initialized():
            raise RuntimeError("ParallelDims.build needs torch.distributed initialised (run under torchrun)")
        self.check(dist.get_world_size(), gpus_per_node)
        mesh = init_device_mesh(device_type, (self.pp, self.dp, self.tp), mesh_dim_names=MESH_DIM_NAMES)
        return ParallelGroups(dims=self, mesh=mesh)


@dataclass
class ParallelGroups:
    """The process groups of one layout and this rank's coordinates in it."""

    dims: ParallelDims
    mesh: Any  # torch.distributed.device_mesh.DeviceMesh
    _groups: dict[str, Any] = field(default_factory=dict, repr=False)

    def group(self, name: str) -> Any:
        if name not in self._groups:
            self._groups[name] = self.mesh.get_group(name)
        return self._groups[name]

    @property
    def dp_group(self) -> Any:
        return self.group("dp")

    @property
    def tp_group(self) -> Any:
        return self.group("tp")

    @property
    def pp_group(self) -> Any:
        return self.group("pp")

    def local_rank(self, name: str) -> int:
        return self.mesh.get_local_rank(name)

    @property
    def dp_rank(self) -> int:
        return self.local_rank("dp")

    @property
    def tp_rank(self) -> int:
        return self.local_rank("tp")

    @property
    def pp_rank(self) -> int:
        return self.local_rank("pp")

    def global_rank_of(self, *, pp: int, dp: int, tp: int) -> int:
        """The global rank at mesh coordinates (pp, dp, tp)."""
        return int(self.mesh.mesh[pp, dp, tp].item())

    def pp_peer(self, pp_rank: int) -> int:
        """Global rank of the pipeline stage `pp_rank` holding this rank's dp and tp coordinates."""
        return self.global_rank_of(pp=pp_rank, dp=self.dp_rank, tp=self.tp_rank)
