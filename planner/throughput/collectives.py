"""α–β cost of NCCL-style collectives on the links a process group crosses.

Rank order (the engine's mesh and Megatron's): tensor-parallel ranks are
adjacent, then data-parallel, then pipeline stages. A group of `size` ranks
`stride` apart therefore has `local` members per node on `nodes` nodes.

Ring all-gather / reduce-scatter of a buffer of S bytes (the gathered size):
each rank receives S·(n-1)/n over its intra-node link, and each chunk enters a
node once, through the node's `local` NICs of the group: S·(N-1)/N / (local·B_inter)
for N nodes. The slower leg bounds the pipelined ring (hierarchical collectives
reach the same bound). Latency: one α per ring step. All-reduce = reduce-scatter +
all-gather; NCCL switches to a tree at scale, so its latency is the smaller of
the ring's and the tree's 2·log2(n) steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from planner.hardware.cluster import ClusterSpec


@dataclass(frozen=True)
class Links:
    """Per-GPU, per-direction bytes/s and per-step latency, after link efficiency."""

    intra_Bps: float
    inter_Bps: float
    intra_latency_s: float
    inter_latency_s: float
    gpus_per_node: int


def cluster_links(cluster: ClusterSpec, efficiency: float) -> Links:
    return Links(
        intra_Bps=cluster.intra_node_bandwidth_GBps * 1e9 * efficiency,
        inter_Bps=max(cluster.inter_node_bandwidth_GBps, 1e-3) * 1e9 * efficiency,
        intra_latency_s=cluster.intra_node_latency_us * 1e-6,
        inter_latency_s=cluster.inter_node_latency_us * 1e-6,
        gpus_per_node=cluster.gpus_per_node,
    )


@dataclass(frozen=True, slots=True)
class Group:
    size: int
    local: int  # members per node
    nodes: int


@lru_cache(maxsize=4096)
def process_group(size: int, stride: int, gpus_per_node: int) -> Group:
    if size <= 1:
        return Group(1, 1, 1)
    local = max(1, min(size, gpus_per_node // stride)) if stride < gpus_per_node else 1
    return Group(size, local, math.ceil(size / local))


def _ring_bandwidth_s(links: Links, group: Group, gathered_bytes: float, per_gpu_nic: bool = False) -> float:
    n = group.size
    intra = gathered_bytes * (n - 1) / n / links.intra_Bps if group.local > 1 else 0.0
    inter = 0.0
    if group.nodes > 1:
        # per_gpu_nic: every GPU pulls the off-node share through its own NIC (implementation.py).
        nics = 1 if per_gpu_nic else group.local
        inter = gathered_bytes * (group.nodes - 1) / group.nodes / (nics * links.inter_Bps)
    return max(intra, inter)


def _ring_latency_s(links: Links, group: Group) -> float:
    if group.nodes > 1:
        return (group.size - group.nodes) * links.intra_latency_s + group.nodes * links.inter_latency_s
    return (group.size - 1) * links.intra_latency_s


def all_gather_s(links: Links, group: Group, gathered_bytes: float, per_gpu_nic: bool = False) -> float:
    """Also the cost of a reduce-scatter of a buffer of that size."""
    if group.size <= 1 or gathered_bytes <= 0:
        return 0.0
    return _ring_bandwidth_s(links, group, gathered_bytes, per_gpu_nic) + _ring_latency_s(links, group)


reduce_scatter_s = all_gather_s


def all_reduce_s(links: Links, group: Group, buffer_bytes: float) -> float:
    if group.size <= 1 or buffer_bytes <= 0:
        return 0.0
    return 2.0 * _ring_bandwidth_s(links, group, buffer_bytes) + all_reduce_latency_s(links, group)


def all_reduce_latency_s(links: Links, group: Group) -> float:
    """An all-reduce's latency term, whatever the buffer: the ring's or NCCL's tree's, the smaller."""
    ring = 2.0 * _ring_latency_s(links, group)
    tree = 2.0 * (math.log2(group.local) * links.intra_latency_s + math.log2(group.nodes) * links.inter_latency_s)
    return min(ring, tree)


@dataclass(frozen=True, slots=True)
class PlacedAllReduce:
    """All-reduces on one group's links with the latency worked out once: all_reduce_s of any buffer is then
    its bandwidth term (the search costs a layout's tensor-parallel all-reduce for every micro-batch)."""

    links: Links
    group: Group
    latency_s: float

    def seconds(self, buffer_bytes: float) -> float:
        """all_reduce_s(links, group, buffer_bytes)."""
        if self.group.size <= 1 or buffer_bytes <= 0:
            return 0.0
        return 2.0 * _ring_bandwidth_s(self.links, self.group, buffer_bytes) + self.latency_s


def placed_all_reduce(links: Links, group: Group) -> PlacedAllReduce:
    return PlacedAllReduce(links, group, all_reduce_latency_s(links, group) if group.size > 1 else 0.0)


def all_to_all_s(links: Links, group: Group, bytes_per_rank: float) -> float:
    """Each rank sends (n-1)/n of its buffer; the off-node share goes through its NIC."""
    if group.size <= 1 or bytes_per_rank <= 0:
        return 0.0
    n = group.size
    intra = bytes_per_rank * (group.local - 1) / n / links.intra_Bps
    inter = bytes_per_rank * (n - group.local) / n / links.inter_Bps
    latency = links.inter_latency_s if group.nodes > 1 else links.intra_latency_s
    return max(intra, inter) + latency


def point_to_point_s(links: Links, message_bytes: float, crosses_nodes: bool) -> float:
    if message_bytes <= 0:
        return 0.0
    if crosses_nodes:
        return links.inter_latency_s + message_bytes / links.inter_Bps
    return links.intra_latency_s + message_bytes / links.intra_Bps
