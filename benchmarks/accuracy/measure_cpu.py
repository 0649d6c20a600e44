"""Measure this machine as the planner's `cpu` pseudo-GPU: FLOPs, memory and gloo bandwidth.

    python -m benchmarks.accuracy.measure_cpu [--out benchmarks/results/cpu_profile.json]
    python -m benchmarks.accuracy.measure_cpu --smoke   # seconds: small sizes, the JSON printed, nothing kept

One rank of a CPU run is one process with OMP_NUM_THREADS = cores / ranks, so
the figures are per thread count: fp32 matmul TFLOP/s and copy bandwidth with
one thread and with every core, and the gloo all-reduce bandwidth between two
processes over loopback. The JSON it writes (with the date and the machine) is
what the `cpu` entry of planner/catalog/gpus.json quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "cpu_profile.json"


def _best_of(function, repeats: int) -> float:
    """Fastest of several timings: the machine's capability, not its background load."""
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        timings.append(time.perf_counter() - start)
    return min(timings)


def matmul_tflops(threads: int, size: int = 1024, repeats: int = 7) -> float:
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)  # warm up the kernels
    seconds = _best_of(lambda: [torch.mm(a, b) for _ in range(4)], repeats) / 4
    return 2 * size**3 / seconds / 1e12


def copy_bandwidth_GBps(threads: int, megabytes: int = 256, repeats: int = 5) -> float:
    import torch

    torch.set_num_threads(threads)
    source = torch.ones(megabytes * 2**20 // 4)
    target = torch.empty_like(source)
    target.copy_(source)
    seconds = _best_of(lambda: target.copy_(source), repeats)
    return 2 * source.numel() * 4 / seconds / 1e9  # read + write


def _gloo_worker(rank: int, world: int, port: int, megabytes: float, queue) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    big = torch.ones(int(megabytes * 2**20) // 4)
    small = torch.ones(1)
    dist.all_reduce(big)
    bandwidth, latency = [], []
    for _ in range(5):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(big)
        bandwidth.append(time.perf_counter() - start)
    for _ in range(50):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(small)
        latency.append(time.perf_counter() - start)
    if rank == 0:
        seconds = min(bandwidth)
        bus_bytes = 2 * (world - 1) / world * big.numel() * 4  # ring all-reduce bytes each rank sends
        queue.put(
            {
                "allreduce_bus_bandwidth_GBps": bus_bytes / seconds / 1e9,
                "allreduce_latency_us": statistics.median(latency) * 1e6,
                "allreduce_megabytes": megabytes,
            }
        )
    dist.destroy_process_group()


def gloo_allreduce(world: int = 2, megabytes: float = 64) -> dict:
    import torch.multiprocessing as mp

    from tests.distributed import free_port

    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    port = free_port()
    processes = [
        context.Process(target=_gloo_worker, args=(rank, world, port, megabytes, queue)) for rank in range(world)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=300)
    failed = [process.exitcode for process in processes if process.exitcode != 0]
    if failed or queue.empty():  # without this check, get() would wait forever for a rank that died
        raise RuntimeError(f"the gloo all-reduce ranks did not finish (exit codes {failed})")
    return queue.get()


def machine() -> dict:
    import psutil

    model = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), model)
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "cpu_model": model,
        "logical_cores": os.cpu_count(),
        "ram_total_bytes": psutil.virtual_memory().total,
        "platform": platform.platform(),
        "load_average_1min": os.getloadavg()[0],
    }


def measure(smoke: bool) -> dict:
    """The profile; smoke: sizes small enough for seconds, figures too noisy to quote."""
    import torch

    matmul = {"size": 128, "repeats": 2} if smoke else {}
    copy = {"megabytes": 4, "repeats": 2} if smoke else {}
    cores = os.cpu_count() or 1
    return {
        "measured_at": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "script": "benchmarks/accuracy/measure_cpu.py" + (" --smoke" if smoke else ""),
        "torch_version": torch.__version__,
        "machine": machine(),
        "fp32_matmul_tflops": {
            "1_thread": matmul_tflops(1, **matmul),
            f"{cores}_threads": matmul_tflops(cores, **matmul),
        },
        "copy_bandwidth_GBps": {
            "1_thread": copy_bandwidth_GBps(1, **copy),
            f"{cores}_threads": copy_bandwidth_GBps(cores, **copy),
        },
        "gloo_2_ranks": gloo_allreduce(megabytes=1 if smoke else 64),
        "method": "best of several timings; copy counts read + write bytes; all-reduce bus bytes 2(n-1)/n x size",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--smoke", action="store_true", help="small sizes; the JSON is printed, --out is not written")
    args = parser.parse_args(argv)
    from planner.files import write_json_atomic

    profile = measure(args.smoke)
    if args.smoke:  # written where nothing is kept (the write itself is part of the path), and printed
        with tempfile.TemporaryDirectory() as scratch:
            write_json_atomic(Path(scratch) / DEFAULT_OUT.name, profile)
        print(json.dumps(profile, indent=2))
        return 0
    write_json_atomic(args.out, profile)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
