"""How long the GPU takes for one matmul, one element-wise pass, one attention core.

The matmul model is a smooth roofline: time = (flops/peak + k·bytes/bandwidth)
divided by the fraction of peak a large matmul reaches. Its efficiency,
flops / (time·peak), rises with the arithmetic intensity of the shape and
saturates, so it falls for a small micro-batch x sequence, a narrow hidden size
or a thin tensor-parallel shard, and more so on GPUs whose peak is high
relative to their memory bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.throughput.constants import ThroughputConstants


@dataclass(frozen=True)
class Device:
    """What the kernel models need of a GPU for one compute dtype."""

    peak_flops: float  # dense FLOP/s for the compute dtype, as the vendor quotes it
    matmul_flops: float  # peak x this GPU generation's matmul factor (library_efficiency.py)
    attention_flops: float  # peak x its attention-kernel factor
    memory_Bps: float  # HBM bytes/s
    element_bytes: int  # bytes per activation element
    fp8_matmul_flops: float = 0.0  # FP8 dense peak x the matmul factor; 0 on GPUs without FP8 matmuls


def matmul_seconds(device: Device, rows: float, fan_in: float, fan_out: float, k: ThroughputConstants) -> float:
    """One (rows x fan_in) @ (fan_in x fan_out) matmul."""
    flops = 2.0 * rows * fan_in * fan_out
    traffic = device.element_bytes * (rows * fan_in + fan_in * fan_out + rows * fan_out)
    return (
        flops / device.matmul_flops + k.matmul_traffic_weight * traffic / device.memory_Bps
    ) / k.matmul_peak_fraction


def matmul_efficiency(device: Device, rows: float, fan_in: float, fan_out: float, k: ThroughputConstants) -> float:
    """Achieved fraction of peak for that matmul (for reports and tests)."""
    return 2.0 * rows * fan_in * fan_out / device.peak_flops / matmul_seconds(device, rows, fan_in, fan_out, k)


def elementwise_seconds(
    device: Device, elements: float, k: ThroughputConstants, element_bytes: float | None = None
) -> float:
    """Memory-bound work over `elements` values written by the forward pass."""
    width = device.element_bytes if element_bytes is None else element_bytes
    return k.elementwise_passes * elements * width / device.memory_Bps


def flash_attention_seconds(device: Device, flops_done: float, k: ThroughputConstants) -> float:
    """Forward of a fused attention kernel doing `flops_done` (masked blocks already skipped)."""
    return flops_done / (device.attention_flops * k.attention_peak_fraction)
