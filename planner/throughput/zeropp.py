"""ZeRO++'s three collectives, in place of ZeRO-3's two gathers and its gradient reduce-scatter.

DeepSpeed's ZeRO++ (Wang et al. 2023, arXiv:2306.10209; DeepSpeed's tutorial docs/_tutorials/zeropp.md and its
blog, blogs/zeropp in github.com/microsoft/DeepSpeed) changes what ZeRO-3 sends, not when:

- qwZ (`zero_quantized_weights`): the forward all-gather of each block's parameters travels as int8, "reduce ZeRO
  parameter all-gather communication volume by half from FP16 to INT8" (the tutorial);
- hpZ (`zero_hpz_partition_size`, ideally the GPUs of a node): each node keeps a secondary partition of the 16-bit
  parameters over its own GPUs, so the backward all-gather stays inside the node: it "eliminates inter-node backward
  parameter all-gather communication"; with qwZ on, DeepSpeed quantizes that gather to int8 too
  (runtime/zero/partition_parameters.py, `_all_gather_coalesced`: the secondary tensor goes through
  `quantizer_module.quantize` before the group's all-gather; DeepSpeed 0.19.8 as installed here);
- qgZ (`zero_quantized_gradients`): the gradient reduce-scatter becomes a hierarchical all-to-all of int4 gradients,
  inside the node and then across nodes, each hop quantized; only across nodes: on one node stage3.py reduces as
  ZeRO-3 does (`if self.all2all_process_group is not None and num_nodes > 1`, runtime/zero/stage3.py), so one node
  gets qwZ alone. Its kernel reads the gradients as fp16 (csrc/quantization/pt_binding.cpp, `ds_swizzle_quant`
  casts the input to `__half*`), so bf16 gradients would be misread: ZeRO++ is planned with fp16 only
  (training_config.py refuses it in bf16).

The blog's Chinese edition (blogs/zeropp/chinese/README.md) states the cross-node volume per step: 3M for ZeRO-3
(M the model's size), 0.75M with all three: the forward gather M -> 0.5M, the backward gather M -> 0, the gradient
reduce-scatter M -> 0.25M. Charged here on the same ring bounds as ZeRO-3's collectives (collectives.py), which
reproduces those volumes: the forward gather at 1 byte a parameter, the backward gather over the node's group only
(at 1 byte too), the gradients at half a byte (int4) on both legs.

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
    links: Links, dp_group: Group, params: float, trainable: float, grad_bytes: float
) -> ZeroPlusPlusCollectives:
    """The three collectives over `dp_group` for `params` gathered and `trainable` reduced (at `grad_bytes` where
    qgZ does not apply). Every gather is int8 (qwZ); with hpZ (ranks on several nodes) the backward's stays in the
    node, and qgZ's int4 gradients cross nodes; on one node the gradients are reduced as ZeRO-3 reduces them."""
    hpz = hpz_size(dp_group.size, links.gpus_per_node)
    backward_group = process_group(hpz, 1, links.gpus_per_node) if hpz > 1 else dp_group
    across_nodes = dp_group.nodes > 1
    return ZeroPlusPlusCollectives(
        gather_forward=all_gather_s(links, dp_group, params * INT8_BYTES),
        gather_backward=all_gather_s(links, backward_group, params * INT8_BYTES),
        reduce=reduce_scatter_s(links, dp_group, trainable * (INT4_BYTES if across_nodes else grad_bytes)),
    )


def zeropp_lines(world_size: int, gpus_per_node: int, total_params: int) -> list[str]:
    """What a ZeRO++ plan changes, and how far its estimate has been checked, for the plan's reasons and estimate."""
    hpz = hpz_size(world_size, gpus_per_node)
    secondary_bytes = total_params * 2 / hpz  # the 16-bit copy (fp16: ZeRO++ is planned in fp16 only)
    if hpz > 1:
        what = (
            f"ZeRO++ in fp16-mixed (its int4 gradient kernel reads fp16): int8 parameter gathers, the backward's "
            f"inside the node from hpZ's second copy (the 16-bit "
            f"parameters over {hpz} GPUs: {secondary_bytes / 2**30:.2f} GiB a GPU, in buffers), int4 gradients "
            "across nodes [formula: planner/throughput/zeropp.py, the ZeRO++ blog's 0.75M against ZeRO-3's 3M]"
        )
    else:
        what = (
            "ZeRO++ on one node, in fp16-mixed: int8 parameter gathers (qwZ) only; DeepSpeed reduces the gradients "
            "as ZeRO-3 does inside a node, and hpZ is off [formula: planner/throughput/zeropp.py]"
        )
    caveat = (
        "ZeRO++'s estimate is checked only against its blog's chart labels (18B on 384 V100s), which it over-predicts "
        "by 20-90% (docs/accuracy.md, 'ZeRO++, planned'): measure before you commit to it"
    )
    return [what, caveat]
