"""The launcher's environment: multi-node facts from SLURM and torchrun variables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, Field

SLURM_VARIABLES = (
    "SLURM_JOB_NUM_NODES",
    "SLURM_NNODES",
    "SLURM_NODEID",
    "SLURM_NTASKS",
    "SLURM_JOB_NODELIST",
    "SLURM_GPUS_ON_NODE",
)
TORCHRUN_VARIABLES = (
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GROUP_RANK",
    "NODE_RANK",
)


class LaunchContext(BaseModel):
    """Multi-node facts from SLURM and torchrun environment variables (None where unset)."""

    launcher: Literal["none", "slurm", "torchrun", "slurm+torchrun"] = "none"
    num_nodes: int | None = None
    node_rank: int | None = None
    world_size: int | None = None
    rank: int | None = None
    local_rank: int | None = None
    local_world_size: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    slurm_ntasks: int | None = None
    slurm_job_nodelist: str | None = None
    slurm_gpus_on_node: int | None = None
    variables: dict[str, str] = Field(default_factory=dict)  # the raw values read
    warnings: list[str] = Field(default_factory=list)


def read_launch_context(environ: Mapping[str, str]) -> LaunchContext:
    """SLURM and torchrun variables, parsed; unparsable numbers become warnings, not errors."""
    variables = {name: environ[name] for name in (*SLURM_VARIABLES, *TORCHRUN_VARIABLES) if name in environ}
    warnings: list[str] = []

    def integer(*names: str) -> int | None:
        for name in names:
            if name in variables:
                try:
                    return int(variables[name].strip())
                except ValueError:
                    warnings.append(f"{name}={variables[name]!r} is not an integer; ignored")
        return None

    slurm = any(name in variables for name in SLURM_VARIABLES)
    torchrun = any(name in variables for name in TORCHRUN_VARIABLES)
    launcher = {(False, False): "none", (True, False): "slurm", (False, True): "torchrun"}.get(
        (slurm, torchrun), "slurm+torchrun"
    )
    world_size = integer("WORLD_SIZE")
    local_world_size = integer("LOCAL_WORLD_SIZE")
    num_nodes = integer("SLURM_JOB_NUM_NODES", "SLURM_NNODES")
    if num_nodes is None and world_size and local_world_size and world_size % local_world_size == 0:
        num_nodes = world_size // local_world_size  # torchrun gives no node count, only these two
    return LaunchContext(
        launcher=launcher,
        num_nodes=num_nodes,
        node_rank=integer("SLURM_NODEID", "GROUP_RANK", "NODE_RANK"),
        world_size=world_size,
        rank=integer("RANK"),
        local_rank=integer("LOCAL_RANK"),
        local_world_size=local_world_size,
        master_addr=variables.get("MASTER_ADDR"),
        master_port=integer("MASTER_PORT"),
        slurm_ntasks=integer("SLURM_NTASKS"),
        slurm_job_nodelist=variables.get("SLURM_JOB_NODELIST"),
        slurm_gpus_on_node=integer("SLURM_GPUS_ON_NODE"),
        variables=variables,
        warnings=warnings,
    )
