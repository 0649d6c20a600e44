"""Micro-benchmark: how fast the strategy search can call the memory estimator.

    python -m benchmarks.speed.memory_speed [--model llama-2-7b] [--calls 10000]
    python -m benchmarks.speed.memory_speed --smoke   # 100 calls: the path, not the budget

Budget (issue 3 / search): 10,000 estimates in under 200 ms. Three figures:
- distinct: every call a different TrainingConfig, caches cleared first (a cold search);
- repeated: the same configs again (the search re-asks for other GPUs of one size);
- typed: estimate_memory, which also builds the pydantic MemoryEstimate.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from planner.memory import activations, phases, rank_params  # noqa: E402
from planner.memory.estimate import estimate_memory, estimate_memory_bytes  # noqa: E402
from planner.models.resolve import resolve_model  # noqa: E402
from planner.training_config import TrainingConfig  # noqa: E402

SMOKE_CALLS = 100
LAYOUTS = [
    {"strategy": "ddp"},
    {"strategy": "fsdp"},
    {"strategy": "fsdp", "fsdp_sharding": "grad-op"},
    {"strategy": "deepspeed", "zero_stage": 1},
    {"strategy": "deepspeed", "zero_stage": 2},
    {"strategy": "deepspeed", "zero_stage": 3},
    {"strategy": "deepspeed", "zero_stage": 3, "offload_optimizer": "cpu"},
    {"strategy": "engine", "zero_stage": 1, "layout": {"tp": 2, "pp": 2}, "grad_accum": 8},
    {"strategy": "engine", "zero_stage": 1, "layout": {"tp": 4}, "sequence_parallel": True},
]


def distinct_configs(count: int) -> list[TrainingConfig]:
    grid = itertools.product(
        LAYOUTS,
        range(1, 17),  # micro-batch
        (512, 1024, 2048, 4096, 8192),
        ("none", "selective", "full"),
        ("bf16-mixed", "bf16", "fp32"),
        ("adamw", "sgd"),
    )
    configs = []
    for layout, micro_batch, seq_len, ac, precision, optimizer in grid:
        configs.append(
            TrainingConfig(
                **layout,
                micro_batch=micro_batch,
                seq_len=seq_len,
                activation_checkpointing=ac,
                precision=precision,
                optimizer=optimizer,
            )
        )
        if len(configs) == count:
            break
    return configs


def clear_caches() -> None:
    for cached in (activations._per_token, rank_params._rank_params):
        cached.cache_clear()
    phases._PARTS.clear()
    phases._PEAKS.clear()


def timed(label: str, calls: int, run) -> float:
    """CPU time of this process (wall time too): on a shared machine the wall clock
    also counts other processes' turns."""
    started, started_cpu = time.perf_counter(), time.process_time()
    run()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    print(
        f"{label:34s} {calls} calls: {cpu * 1e3:7.1f} ms CPU ({cpu / calls * 1e6:5.1f} us/call), {elapsed * 1e3:7.1f} ms wall"
    )
    return cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama-2-7b")
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_CALLS} calls instead of --calls")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be at least 1")

    spec = resolve_model(args.model)
    configs = distinct_configs(SMOKE_CALLS if args.smoke else args.calls)
    calls = len(configs)

    def raw() -> None:
        for config in configs:
            estimate_memory_bytes(spec, config, world_size=64, gpus_per_node=8)

    def typed() -> None:
        for config in configs:
            estimate_memory(spec, config, world_size=64, gpus_per_node=8, gpu_capacity_bytes=80 * 2**30)

    clear_caches()
    timed("estimate_memory_bytes, distinct", calls, raw)
    timed("estimate_memory_bytes, repeated", calls, raw)
    clear_caches()
    timed("estimate_memory (typed), distinct", calls, typed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
