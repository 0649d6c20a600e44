"""Networks between nodes: the presets a plan names (`--interconnect`), in the unit vendors quote (Gb/s per
direction), and the one a cluster gets when none is named (its GPU's typical fabric, said in its assumptions).
Bandwidths become ClusterSpec's GB/s per GPU per direction (planner/hardware/cluster.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import UserInputError
from planner.hardware.gpus import GpuSpec


class InterNodePreset(BaseModel):
    """A common network between nodes, in the unit vendors quote: Gb/s per direction."""

    model_config = ConfigDict(frozen=True)

    name: str
    gbps: float = Field(ge=0)
    # "gpu": every GPU has its own NIC of this speed (DGX rail-optimised fabrics);
    # "node": the node's NICs add up to this, shared by all its GPUs.
    per: Literal["gpu", "node"]
    latency_us: float = Field(ge=0)
    description: str

    def GBps_per_gpu(self, gpus_per_node: int) -> float:
        per_gpu_gbps = self.gbps if self.per == "gpu" else self.gbps / gpus_per_node
        return per_gpu_gbps / 8  # bits -> bytes


# Latencies are assumptions (order of magnitude of NCCL's per-hop base latency),
# to be replaced by measured values once benchmarks exist.
INTER_NODE_PRESETS: dict[str, InterNodePreset] = {
    preset.name: preset
    for preset in (
        InterNodePreset(name="none", gbps=0, per="node", latency_us=0, description="single node, no network"),
        InterNodePreset(
            name="ib-ndr",
            gbps=400,
            per="gpu",
            latency_us=6,
            description="InfiniBand NDR, one 400 Gb/s ConnectX-7 per GPU (DGX H100)",
        ),
        InterNodePreset(
            name="ib-hdr",
            gbps=200,
            per="gpu",
            latency_us=6,
            description="InfiniBand HDR, one 200 Gb/s HCA per GPU (DGX A100)",
        ),
        InterNodePreset(
            name="roce-1600g",
            gbps=1600,
            per="node",
            latency_us=8,
            description="RoCE, 1600 Gb/s per node = 200 Gb/s per GPU with 8 GPUs (MosaicML's A100 cluster)",
        ),
        InterNodePreset(
            name="roce-3200g",
            gbps=3200,
            per="node",
            latency_us=8,
            description="RoCE, 3200 Gb/s per node = 400 Gb/s per GPU with 8 GPUs",
        ),
        InterNodePreset(
            name="efa",
            gbps=400,
            per="node",
            latency_us=15,
            description="AWS EFA on p4d (4 x 100 Gb/s per node)",
        ),
        InterNodePreset(
            name="efa-p5",
            gbps=3200,
            per="node",
            latency_us=15,
            description="AWS EFA v2 on p5 (3200 Gb/s per node)",
        ),
        InterNodePreset(
            name="ethernet-100g",
            gbps=100,
            per="node",
            latency_us=30,
            description="one 100 GbE port per node, TCP sockets",
        ),
        InterNodePreset(
            name="ethernet-25g",
            gbps=25,
            per="node",
            latency_us=50,
            description="one 25 GbE port per node, TCP sockets",
        ),
    )
}


def inter_node_preset(name: str) -> InterNodePreset:
    preset = INTER_NODE_PRESETS.get(name.lower().strip())
    if preset is None:
        known = ", ".join(INTER_NODE_PRESETS)
        raise UserInputError(f"unknown interconnect '{name}'; use one of {known}")
    return preset


def choose_preset(spec: GpuSpec, nodes: int, interconnect: str | None, assumptions: list[str]) -> InterNodePreset:
    """The network a cluster of `nodes` gets: the one named, else none on one node, else the GPU's typical fabric;
    where it came from is appended to `assumptions`."""
    if interconnect is not None:
        preset = inter_node_preset(interconnect)
        if nodes > 1 and preset.name == "none":
            raise UserInputError(f"{nodes} nodes need a network; pick an interconnect other than 'none'")
        assumptions.append(f"inter-node: {preset.description} (user)")
        return preset
    if nodes == 1:
        return INTER_NODE_PRESETS["none"]
    preset = INTER_NODE_PRESETS[spec.typical_inter_node]
    assumptions.append(f"inter-node: {preset.description} (typical for {spec.name}; set --interconnect)")
    return preset
