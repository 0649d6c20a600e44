"""How fast this machine's collectives run, measured on the process group a tune's trials share.

A tune that finds a plan slower or faster than predicted says why when it can: the throughput model assumes
a per-rank link bandwidth (planner/throughput/collectives.py: a ring all-gather or reduce-scatter of S
bytes moves S·(n-1)/n through each rank's link, an all-reduce twice that). After a launch's first trial, the
trials runner (backends/runner/trials.py) times each collective on a buffer of PROBE_BYTES, and this module
turns the times into that same per-rank figure (NCCL-tests call it "bus bandwidth"), so the two compare as
they stand (docs/running.md, "Tune").
"""

from __future__ import annotations

import statistics
import time

PROBE_BYTES = 16 * 2**20  # large enough that latency is a small share over gloo or NCCL
WARMUP = 2
REPEATS = 5
KINDS = ("all-gather", "reduce-scatter", "all-reduce")


def bus_GBps(kind: str, buffer_bytes: float, seconds: float, ranks: int) -> float:
    """Bytes through each rank's link per second, as the throughput model counts them (GB/s)."""
    moved = buffer_bytes * (ranks - 1) / ranks * (2 if kind == "all-reduce" else 1)
    return moved / seconds / 1e9


def probe_links(buffer_bytes: int = PROBE_BYTES) -> dict[str, float]:
    """Each collective's bus bandwidth on the default process group (GB/s); {} with one process."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return {}
    ranks = dist.get_world_size()
    cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    elements = buffer_bytes // 4 // ranks * ranks
    whole = torch.ones(elements, dtype=torch.float32, device=device)
    part = torch.ones(elements // ranks, dtype=torch.float32, device=device)
    run = {
        "all-gather": lambda: dist.all_gather_into_tensor(whole, part),
        "reduce-scatter": lambda: dist.reduce_scatter_tensor(part, whole),
        "all-reduce": lambda: dist.all_reduce(whole),
    }
    measured = {}
    for kind in KINDS:
        times = []
        for repeat in range(WARMUP + REPEATS):
            dist.barrier()
            began = time.perf_counter()
            run[kind]()
            if cuda:
                torch.cuda.synchronize(device)
            if repeat >= WARMUP:
                times.append(time.perf_counter() - began)
        slowest = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # the collective ends when its slowest rank does
        measured[kind] = bus_GBps(kind, elements * 4, float(slowest.item()), ranks)
    return measured
