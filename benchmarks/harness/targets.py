"""Which GPU a benchmark matrix targets, for each hardware kind the user names.

A GPU of that kind on this machine wins (it is what `--run` measures);
otherwise `--gpu` or the kind's default, said out loud, because predictions
for a GPU that is not here are only predictions.
"""

from __future__ import annotations

from pydantic import BaseModel

from benchmarks.harness.matrix import DEFAULT_GPU
from planner.errors import UserInputError
from planner.hardware.gpus import resolve_gpu

HARDWARE_KINDS = tuple(DEFAULT_GPU)


class HardwareTarget(BaseModel):
    hardware: str
    gpu: str
    note: str
    local: bool  # can --run measure it here
    local_count: int = 0
    driver: str | None = None


def _local_gpus(hardware: str) -> tuple[list[str], str | None]:
    """Catalog names of this machine's GPUs of a kind, and the driver version."""
    if hardware == "cpu":
        return [], None
    from planner.hardware.detect import detect_hardware

    report = detect_hardware()
    vendor = "nvidia" if hardware == "cuda" else "amd"
    names = [
        gpu.catalog_name for gpu in report.gpus if gpu.catalog_name and resolve_gpu(gpu.catalog_name).vendor == vendor
    ]
    return names, report.driver_version


def choose_target(hardware: str, gpu: str | None) -> HardwareTarget:
    if hardware not in HARDWARE_KINDS:
        raise UserInputError(f"unknown hardware '{hardware}'; use one or more of {', '.join(HARDWARE_KINDS)}")
    if gpu is not None and not gpu.strip():
        raise UserInputError("--gpu is empty; give it a value, or leave it out")
    if hardware == "cpu" and gpu is not None and resolve_gpu(gpu).kind != "cpu":  # it was dropped without a word
        raise UserInputError(f"--gpu {gpu} names a GPU, and --hardware cpu measures this machine's CPU cores; drop "
                             "--gpu, or pass --hardware cuda (or rocm) with it")  # fmt: skip
    if hardware == "cpu":
        return HardwareTarget(
            hardware="cpu", gpu="cpu", note="this machine's CPU cores, gloo between ranks", local=True, local_count=2
        )
    local, driver = _local_gpus(hardware)
    if gpu is not None:
        spec = resolve_gpu(gpu)
        if spec.kind != "gpu":  # --hardware cuda --gpu cpu: a CPU is no GPU of that kind
            raise UserInputError(f"--gpu {gpu} is no GPU; pass --hardware cpu to measure the CPU cores")
        here = local.count(spec.name)
        where = f"{here} here" if here else "none here: predictions only"
        return HardwareTarget(
            hardware=hardware,
            gpu=spec.name,
            note=f"{spec.name} (--gpu; {where})",
            local=bool(here),
            local_count=here,
            driver=driver,
        )
    if local:
        return HardwareTarget(
            hardware=hardware,
            gpu=local[0],
            note=f"{len(local)} x {local[0]} detected here",
            local=True,
            local_count=len(local),
            driver=driver,
        )
    default = DEFAULT_GPU[hardware]
    return HardwareTarget(
        hardware=hardware,
        gpu=default,
        local=False,
        note=f"no {hardware} GPU here: targeting {default}, the default for {hardware} "
        "(choose another with --gpu); predictions only",
    )
