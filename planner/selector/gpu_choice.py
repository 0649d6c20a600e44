"""Which GPU a selector request means, and the cluster of `gpu_count` of them (docs/selector.md).

`max_memory_gb` (GiB, the unit "24GB" cards are sized in) means "a GPU of that
memory": with `gpu=` given, that GPU capped at this memory; otherwise the
catalog GPU of that size with the most peak TFLOP/s per dollar (datacenter
parts first; at the price catalog's cheapest on-demand price, GPUs it has no
price for after the others); if the catalog has none of that size, the
smallest larger one, capped. Without either, an A100-80GB.
"""

from __future__ import annotations

from collections.abc import Mapping

from planner.errors import UserInputError, spelled
from planner.hardware.cluster import ClusterSpec, make_cluster
from planner.hardware.gpus import GpuSpec, load_gpu_catalog, resolve_gpu
from planner.hardware.memory_cap import capped

DEFAULT_GPU = "A100-80GB"
DEFAULT_GPUS_PER_NODE = 8


def _best_value_key(gpu: GpuSpec) -> tuple:
    dtype = "bf16" if gpu.supports("bf16") else "fp16" if gpu.supports("fp16") else "fp32"
    peak = gpu.peak_tflops(dtype) if gpu.supports(dtype) else 0.0
    price = gpu.price_usd_per_hour
    per_dollar = peak / price if price else peak  # unpriced GPUs come after the priced ones, by peak
    return (gpu.segment != "datacenter", price is None, -per_dollar)


def gpu_with_memory(
    max_memory_gb: float | None, gpu: str | None = None, names: Mapping[str, str] | None = None
) -> GpuSpec:
    """The GPU a request means (see the module docstring); `names`: how the asking door spells max_memory_gb."""
    if max_memory_gb is not None and max_memory_gb <= 0:
        raise UserInputError(f"{spelled(names or {}, 'max_memory_gb')} must be positive, not {max_memory_gb}")
    if gpu is not None:
        chosen = resolve_gpu(gpu)
        return capped(chosen, max_memory_gb) if max_memory_gb else chosen
    if max_memory_gb is None:
        return resolve_gpu(DEFAULT_GPU)
    gpus = [entry for entry in load_gpu_catalog() if entry.kind == "gpu"]
    same_size = [entry for entry in gpus if abs(entry.memory_gib - max_memory_gb) <= 0.05 * max_memory_gb]
    if same_size:
        return min(same_size, key=_best_value_key)
    larger = [entry for entry in gpus if entry.memory_gib > max_memory_gb]
    if not larger:
        largest = max(gpus, key=lambda entry: entry.memory_bytes)
        given = spelled(names or {}, "max_memory_gb", max_memory_gb)
        raise UserInputError(f"{given} exceeds every catalog GPU (largest: {largest.name})")
    return capped(min(larger, key=lambda entry: (entry.memory_bytes, _best_value_key(entry))), max_memory_gb)


def cluster_for(
    gpu: GpuSpec,
    gpu_count: int,
    gpus_per_node: int | None = None,
    *,
    nvme_gb: float | None = None,
    nvme_gbps: float | None = None,
    names: Mapping[str, str] | None = None,
) -> ClusterSpec:
    """gpu_count GPUs in nodes of gpus_per_node (default: up to 8), with the NVMe per node the caller names.
    `names`: how the asking door spells gpu_count and gpus_per_node in its errors (HardwareSelector.argument_names)."""
    names = names or {}
    if gpu_count < 1:
        raise UserInputError(f"{spelled(names, 'gpu_count')} must be at least 1, not {gpu_count}")
    per_node = gpus_per_node or min(gpu_count, DEFAULT_GPUS_PER_NODE)
    if gpu_count % per_node:
        count = spelled(names, "gpu_count", gpu_count)
        if gpus_per_node is None:  # more than one default node of 8, and not a whole number of them
            # A door with its own spelling that has none for gpus_per_node (the seed CLI) cannot set it.
            settable = not names or "gpus_per_node" in names
            other_node = f"pass {spelled(names, 'gpus_per_node')} that divides it, or " if settable else ""
            raise UserInputError(
                f"{count} is not a whole number of nodes of {per_node} GPUs (the default node); {other_node}"
                f"give a multiple of {per_node}"
            )
        one_node = spelled(names, "gpus_per_node", gpu_count) if gpu_count < per_node else None
        raise UserInputError(
            f"{count} is not a whole number of nodes of {spelled(names, 'gpus_per_node', per_node)}: make "
            f"{spelled(names, 'gpu_count')} a multiple of {per_node}"
            + (f", or pass {one_node} for one node of {gpu_count}" if one_node else "")
        )
    return make_cluster(gpu, gpus_per_node=per_node, nodes=gpu_count // per_node, nvme_gb=nvme_gb, nvme_gbps=nvme_gbps)
