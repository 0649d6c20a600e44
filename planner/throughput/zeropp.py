"""ZeRO++'s three collectives, in place of ZeRO-3's two gathers and its gradient reduce-scatter.

DeepSpeed's ZeRO++ (Wang et al. 2023, arXiv:2306.10209; DeepSpeed's tutorial docs/_tutorials/zeropp.md and its
blog, blogs/zeropp in github.com/microsoft/DeepSpeed) changes what ZeRO-3 sends, not when:

- qwZ (`zero_quantized_weights`): the forward all-gather of each block's parameters travels as int8, "reduce ZeRO
  parameter all-gather communication volume by half from FP16 to INT8" (the tutorial);
- hpZ (`zero_hpz_partition_size`, ideally the GPUs of a node): each node keeps a secondary partition of the 16-bit
  parameters over its own GPUs, so the backward all-gather stays inside the node: it "eliminates inter-node backward
  parameter all-gather communication";
- qgZ (`zero_quantized_gradients`): the gradient reduce-scatter becomes a hierarchical all-to-all of int4 gradients,
  inside the node and then across nodes, each hop quantized.

The blog's Chinese edition (blogs/zeropp/chinese/README.md) states the cross-node volume per step: 3M for ZeRO-3
(M the model's size), 0.75M with all three: the forward gather M -> 0.5M, the backward gather M -> 0, the gradient
reduce-scatter M -> 0.25M. Charged here on the same ring bounds as ZeRO-3's collectives (collectives.py), which
reproduces those volumes: the forward gather at 1 byte a parameter, the backward gather over the node's group only,
the gradients at half a byte (int4) on both legs.

ASSUMED, not charged: the (de)quantization kernels (each a pass over the gathered or reduced tensor, fused in
DeepSpeed's CUDA ops), the int8 blocks' scales, and the all-to-all's latency where it differs from a ring's.
The secondary partition's memory (the 16-bit parameters over the node's GPUs) is planner/memory/buffers.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.throughput.collectives import Group, Links, all_gather_s, process_group, reduce_scatter_s

INT8_BYTES = 1.0  # qwZ: the forward gather's weights
INT4_BYTES = 0.5  # qgZ: the gradients on both hops


@dataclass(frozen=True, slots=True)
class ZeroPlusPlusCollectives:
    """Seconds per micro-batch of each collective (a whole step's worth of blocks)."""

    gather_forward: float
    gather_backward: float
    reduce: float


def hpz_size(data_parallel: int, gpus_per_node: int) -> int:
    """hpZ's secondary partition: over the GPUs of one node (the tutorial's "ideal is number of ranks (gpus) per
    node"), where the data-parallel ranks span nodes; 1 (no hpZ, DeepSpeed's default) where they fit in one node,
    whose backward gathers never leave it anyway."""
    return gpus_per_node if data_parallel > gpus_per_node else 1


def zeropp_collectives(
    links: Links, dp_group: Group, params: float, trainable: float, param_bytes: float
) -> ZeroPlusPlusCollectives:
    """The three collectives over `dp_group` for `params` gathered (at `param_bytes` a parameter without ZeRO++)
    and `trainable` reduced. Without hpZ (one node) the backward gathers are qwZ's int8 gathers too."""
    hpz = hpz_size(dp_group.size, links.gpus_per_node)
    if hpz > 1:
        gather_backward = all_gather_s(links, process_group(hpz, 1, links.gpus_per_node), params * param_bytes)
    else:
        gather_backward = all_gather_s(links, dp_group, params * INT8_BYTES)
    return ZeroPlusPlusCollectives(
        gather_forward=all_gather_s(links, dp_group, params * INT8_BYTES),
        gather_backward=gather_backward,
        reduce=reduce_scatter_s(links, dp_group, trainable * INT4_BYTES),
    )
