"""How long one throughput estimate takes (the search calls it thousands of times).

    .venv/bin/python -m benchmarks.speed.throughput_speed
    .venv/bin/python -m benchmarks.speed.throughput_speed --smoke   # one strategy's 90 candidates

Measures CPU time (process_time), so other work on the machine inflates it
little. Two passes over the same 810 candidates a search might enumerate for
one model: the first computes every micro-batch's kernels, the second finds
them in the per-stage cache (strategy, sharding, offload and accumulation
do not change them).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

from planner.hardware.cluster import make_cluster
from planner.models.resolve import resolve_model
from planner.throughput.estimate import estimate_throughput
from planner.training_config import TrainingConfig

STRATEGIES = (
    dict(strategy="ddp"),
    dict(strategy="fsdp"),
    dict(strategy="fsdp", fsdp_sharding="hybrid"),
    dict(strategy="deepspeed", zero_stage=1),
    dict(strategy="deepspeed", zero_stage=2),
    dict(strategy="deepspeed", zero_stage=3),
    dict(strategy="deepspeed", zero_stage=3, offload_optimizer="cpu"),
    dict(strategy="engine", layout={"tp": 2}, zero_stage=1),
    dict(strategy="engine", layout={"tp": 4, "pp": 2}, zero_stage=1),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the first strategy's candidates only")
    args = parser.parse_args(argv)
    spec = resolve_model("llama-2-7b")
    cluster = make_cluster("H100-80GB", 8, 4)
    configs = [
        TrainingConfig(micro_batch=mb, grad_accum=accum, activation_checkpointing=ac, seq_len=4096, **strategy)
        for strategy, mb, accum, ac in itertools.product(
            STRATEGIES[:1] if args.smoke else STRATEGIES,
            (1, 2, 4, 8, 16),
            (1, 2, 4, 8, 16, 32),
            ("none", "selective", "full"),
        )
    ]
    for label in ("cold stage cache", "warm stage cache"):
        start = time.process_time()
        for config in configs:
            estimate_throughput(spec, config, cluster)
        per_call = (time.process_time() - start) / len(configs)
        print(f"{len(configs)} estimates, {label}: {per_call * 1e6:.1f} µs each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
