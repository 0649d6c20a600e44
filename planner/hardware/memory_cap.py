"""A GPU whose memory a request capped (the selector's max_memory_gb, "a GPU of that memory"), and how an answer
names it.

A capped GpuSpec keeps its catalog name, so plans and look-ups by name still work; a cap is recognised by its
memory being below its catalog entry's. Everything an answer says about such a GPU names the cap
("V100-16GB capped at 2 GiB"), and every other GPU it suggests instead is capped alike: without that, an answer
capped at 2 GiB suggested "at 2 GPUs, V100-16GB fits" (the uncapped 16 GiB part), which the same cap refuses.
"""

from __future__ import annotations

from planner.hardware.gpus import GpuSpec, find_gpu

GIB = 2**30


def capped(gpu: GpuSpec, memory_gib: float) -> GpuSpec:
    """`gpu` with at most `memory_gib` GiB of memory (unchanged when it has no more), the cap in its notes."""
    if gpu.memory_bytes <= memory_gib * GIB:
        return gpu
    note = f"memory capped at {memory_gib:g} GiB (max_memory_gb)"
    return gpu.model_copy(update={"memory_bytes": int(memory_gib * GIB), "notes": f"{gpu.notes} {note}".strip()})


def memory_cap_gib(gpu: GpuSpec) -> float | None:
    """The GiB `gpu` was capped at, or None for a GPU of its catalog entry's memory. The cpu pseudo-device's
    memory is the host's RAM shared by its ranks (planner/hardware/cluster.py), not a cap."""
    if gpu.kind != "gpu":
        return None
    entry = find_gpu(gpu.name)
    if entry is None or gpu.memory_bytes >= entry.memory_bytes:
        return None
    return gpu.memory_bytes / GIB


def capped_like(gpu: GpuSpec, reference: GpuSpec) -> GpuSpec:
    """`gpu` under the cap `reference` is under (none: `gpu` itself): a GPU suggested in its place."""
    cap = memory_cap_gib(reference)
    return gpu if cap is None else capped(gpu, cap)


def gpu_label(gpu: GpuSpec) -> str:
    """The GPU's name, with its cap when it has one ("V100-16GB capped at 2 GiB")."""
    cap = memory_cap_gib(gpu)
    return gpu.name if cap is None else f"{gpu.name} capped at {cap:.3g} GiB"
