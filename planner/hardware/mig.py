"""MIG slices among the detected GPUs: named and refused, since the planner plans whole GPUs."""

from __future__ import annotations

import re

from planner.errors import UserInputError
from planner.hardware.gpus import find_gpu

# A MIG instance as NVML names it: "NVIDIA H100 80GB HBM3 MIG 1g.10gb" (its share of the SMs, in sevenths, and its
# memory). The planner plans whole GPUs; an audit saw a slice advised to plan as the 80 GB GPU.
MIG_SLICE = re.compile(r"\bMIG\s+(\d+)g\.(\d+)gb\b", re.IGNORECASE)


def refuse_mig_slices(names: list[str]) -> None:
    """One line for a MIG slice among the detected GPUs (docs/hardware.md, "Detection"); nothing otherwise."""
    slices = [name for name in names if MIG_SLICE.search(name)]
    if not slices:
        return
    name = slices[0]
    match = MIG_SLICE.search(name)
    assert match is not None
    parent = find_gpu(name[: match.start()].strip())
    whole = f"plan the whole {parent.name} with --gpu {parent.name}, " if parent is not None else ""
    raise UserInputError(
        f"detected a MIG slice, '{name}' ({match.group(1)}/7 of the GPU's compute, {match.group(2)} GB): slices are "
        f"not planned; {whole}or disable MIG on the node (nvidia-smi -mig 0) and plan again"
    )
