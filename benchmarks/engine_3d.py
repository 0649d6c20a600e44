"""Benchmark (not a test): the same model under dp, tp, pp and mixed layouts on 2 and 4 CPU ranks.

For each layout one torchrun job trains a small GPT-2-shaped model (fp32,
gloo, SGD) and reports the median step time and, per rank, the parameters it
holds and its peak resident memory. Beside the measured parameter count sits
the planner's prediction for the most loaded rank
(planner.memory.rank_params: blocks/tp x layers/pp + embedding/tp), so the
1/tp and 1/pp scaling is checked against the same formula the planner uses.

    python -m benchmarks.engine_3d [--json] [--steps 4] [--ranks 2 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from planner.files import write_json_atomic

SIZES = {"hidden": 256, "layers": 8, "heads": 8, "ffn": 1024, "vocab_size": 8192, "positions": 256}
SEQ_LEN, MICRO_BATCH, MICRO_BATCHES = 128, 2, 4
LAYOUTS = {  # ranks -> (dp, tp, pp)
    2: [(2, 1, 1), (1, 2, 1), (1, 1, 2)],
    4: [(4, 1, 1), (1, 4, 1), (1, 1, 4), (2, 2, 1), (2, 1, 2), (1, 2, 2)],
}


def model_config() -> dict[str, Any]:
    from backends.model_factory import catalog_config, tiny_config

    return tiny_config(catalog_config("gpt2"), **SIZES)


def worker(dp: int, tp: int, pp: int, steps: int, out: str) -> None:
    """One layout under torchrun: time `steps` optimizer steps after one warm-up step."""
    import resource

    import torch
    import torch.distributed as dist

    from backends.compression import reduce_gradients
    from backends.model_factory import build_causal_lm
    from backends.parallel_dims import ParallelDims
    from backends.parallelize import parallelize

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    parallel = parallelize(build_causal_lm(model_config(), seed=0, dtype=torch.float32), ParallelDims(dp, tp, pp))
    optimizer = torch.optim.SGD(parallel.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(parallel.groups.dp_rank)
    times = []
    for step in range(steps + 1):
        ids = torch.randint(0, SIZES["vocab_size"], (MICRO_BATCH * MICRO_BATCHES, SEQ_LEN), generator=generator)
        dist.barrier()
        began = time.perf_counter()
        optimizer.zero_grad()
        parallel.train_batch([(chunk, chunk) for chunk in ids.chunk(MICRO_BATCHES)])
        reduce_gradients(list(parallel.parameters()), parallel.groups.dp_group)
        optimizer.step()
        dist.barrier()
        if step:  # the first step builds the pipeline schedule and warms the allocator
            times.append(time.perf_counter() - began)
    record = {
        "rank": dist.get_rank(),
        "params": sum(p.numel() for p in parallel.parameters()),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "step_s": statistics.median(times),
    }
    records: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(records, record)
    if dist.get_rank() == 0:
        write_json_atomic(out, records)
    dist.destroy_process_group()


def predicted_rank_params(tp: int, pp: int) -> int:
    """The planner's parameters on the most loaded rank for this layout."""
    from planner.memory.rank_params import rank_params
    from planner.models.hf_config import spec_from_hf_config
    from planner.training_config import Strategy, TrainingConfig

    spec = spec_from_hf_config(model_config(), name="gpt2-bench", origin="benchmark")
    config = TrainingConfig(
        strategy=Strategy.ENGINE,
        layout={"tp": tp, "pp": pp},
        micro_batch=MICRO_BATCH,
        grad_accum=MICRO_BATCHES,
        seq_len=SEQ_LEN,
    )
    return rank_params(spec, config).total


def run_layout(dp: int, tp: int, pp: int, steps: int, directory: Path) -> dict[str, Any]:
    from tests.distributed import run_torchrun

    out = directory / f"dp{dp}_tp{tp}_pp{pp}.json"
    run_torchrun(
        ["-m", "benchmarks.engine_3d", "--worker", f"{dp},{tp},{pp}", "--steps", str(steps), "--out", str(out)],
        nproc=dp * tp * pp,
        timeout=900,
    )
    records = json.loads(out.read_text())
    measured = max(record["params"] for record in records)
    predicted = predicted_rank_params(tp, pp)
    return {
        "layout": f"dp{dp} tp{tp} pp{pp}",
        "ranks": dp * tp * pp,
        "step_s": max(record["step_s"] for record in records),
        "max_rank_params": measured,
        "predicted_rank_params": predicted,
        "measured_over_predicted": round(measured / predicted, 4),
        "peak_rss_mib": [round(record["peak_rss_mib"]) for record in records],
        "tokens_per_s": round(dp * MICRO_BATCH * MICRO_BATCHES * SEQ_LEN / max(record["step_s"] for record in records)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4], choices=sorted(LAYOUTS))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(*(int(part) for part in args.worker.split(",")), args.steps, args.out)
        return 0
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for ranks in args.ranks:
            for dp, tp, pp in LAYOUTS[ranks]:
                rows.append(run_layout(dp, tp, pp, args.steps, Path(directory)))
                if not args.json:
                    print(_format(rows[-1]), flush=True)
    if args.json:
        print(
            json.dumps(
                {
                    "model": {**SIZES, "seq_len": SEQ_LEN, "micro_batch": MICRO_BATCH, "micro_batches": MICRO_BATCHES},
                    "results": rows,
                },
                indent=1,
            )
        )
    return 0


def _format(row: dict[str, Any]) -> str:
    return (
        f"{row['layout']:<15} step {row['step_s']:.3f} s  {row['tokens_per_s']:>6} tok/s  "
        f"params/rank {row['max_rank_params']:>9,} (planner {row['predicted_rank_params']:>9,}, "
        f"x{row['measured_over_predicted']})  peak RSS MiB {row['peak_rss_mib']}"
    )


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    exit_worker(main())
