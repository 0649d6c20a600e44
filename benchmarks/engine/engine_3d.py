"""Benchmark (not a test): the same model under dp, tp, pp and mixed layouts on 2 and 4 CPU ranks.

For each layout one torchrun job trains a small GPT-2-shaped model (fp32,
gloo, SGD) and reports the median step time and, per rank, the parameters it
holds and its peak resident memory. Beside the measured parameter count sits
the planner's prediction for the most loaded rank
(planner.memory.rank_params: blocks/tp x layers/pp + embedding/tp), so the
1/tp and 1/pp scaling is checked against the same formula the planner uses.

    python -m benchmarks.engine.engine_3d [--json] [--steps 4] [--ranks 2 4]
    python -m benchmarks.engine.engine_3d --smoke [--json]   # seconds: a tiny model, the 2-rank layouts

--smoke runs the 2-rank layouts one after the other in a single torchrun job (one start-up of torch instead
of three), on a 2-layer model for one timed step: its figures say that the code runs, not how fast (peak RSS
is the job's so far, not the layout's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from planner.files import write_json_atomic


@dataclass(frozen=True)
class Workload:
    """The model's sizes (tiny_config's keywords) and the batch each step trains."""

    sizes: dict[str, int]
    seq_len: int
    micro_batch: int
    micro_batches: int


FULL = Workload(
    sizes={"hidden": 256, "layers": 8, "heads": 8, "ffn": 1024, "vocab_size": 8192, "positions": 256},
    seq_len=128,
    micro_batch=2,
    micro_batches=4,
)
SMOKE = Workload(
    sizes={"hidden": 64, "layers": 2, "heads": 2, "ffn": 128, "vocab_size": 512, "positions": 64},
    seq_len=32,
    micro_batch=1,
    micro_batches=2,
)
SMOKE_STEPS = 1
LAYOUTS = {  # ranks -> (dp, tp, pp)
    2: [(2, 1, 1), (1, 2, 1), (1, 1, 2)],
    4: [(4, 1, 1), (1, 4, 1), (1, 1, 4), (2, 2, 1), (2, 1, 2), (1, 2, 2)],
}
Layout = tuple[int, int, int]


def model_config(work: Workload) -> dict[str, Any]:
    from backends.weights.model_factory import catalog_config, tiny_config

    return tiny_config(catalog_config("gpt2"), **work.sizes)


def _key(layout: Layout) -> str:
    dp, tp, pp = layout
    return f"dp{dp}_tp{tp}_pp{pp}"


def train_layout(layout: Layout, work: Workload, steps: int) -> dict[str, Any]:
    """This rank's figures for one layout: time `steps` optimizer steps after one warm-up step."""
    import resource

    import torch
    import torch.distributed as dist

    from backends.model_parallel.split import split_model
    from backends.parallel_dims import ParallelDims
    from backends.parts.compression import reduce_gradients
    from backends.weights.model_factory import build_causal_lm

    dp, tp, pp = layout
    torch.manual_seed(0)
    model = build_causal_lm(model_config(work), seed=0, dtype=torch.float32)
    # split_model, not backends.parallelize: the engine's ParallelModel (train_batch) for every layout, dp-only too
    parallel = split_model(model, ParallelDims(dp=dp, tp=tp, pp=pp))  # ParallelDims is pydantic: keywords only
    optimizer = torch.optim.SGD(parallel.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(parallel.groups.dp_rank)
    times = []
    for step in range(steps + 1):
        shape = (work.micro_batch * work.micro_batches, work.seq_len)
        ids = torch.randint(0, work.sizes["vocab_size"], shape, generator=generator)
        dist.barrier()
        began = time.perf_counter()
        optimizer.zero_grad()
        parallel.train_batch([(chunk, chunk) for chunk in ids.chunk(work.micro_batches)])
        reduce_gradients(list(parallel.parameters()), parallel.groups.dp_group)
        optimizer.step()
        dist.barrier()
        if step:  # the first step builds the pipeline schedule and warms the allocator
            times.append(time.perf_counter() - began)
    return {
        "rank": dist.get_rank(),
        "params": sum(p.numel() for p in parallel.parameters()),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "step_s": statistics.median(times),
    }


def worker(layouts: list[Layout], work: Workload, steps: int, out: str) -> None:
    """Under torchrun: each layout in turn; rank 0 writes {layout key: every rank's figures} to `out`."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    gathered = {}
    for layout in layouts:
        record = train_layout(layout, work, steps)
        records: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(records, record)
        gathered[_key(layout)] = records
    if dist.get_rank() == 0:
        write_json_atomic(out, gathered)
    dist.destroy_process_group()


def predicted_rank_params(tp: int, pp: int, work: Workload) -> int:
    """The planner's parameters on the most loaded rank for this layout."""
    from planner.memory.rank_params import rank_params
    from planner.models.hf_config import spec_from_hf_config
    from planner.training_config import Strategy, TrainingConfig

    spec = spec_from_hf_config(model_config(work), name="gpt2-bench", origin="benchmark")
    config = TrainingConfig(
        strategy=Strategy.ENGINE,
        layout={"tp": tp, "pp": pp},
        micro_batch=work.micro_batch,
        grad_accum=work.micro_batches,
        seq_len=work.seq_len,
    )
    return rank_params(spec, config).total


def run_layouts(layouts: list[Layout], smoke: bool, steps: int, directory: Path) -> list[dict[str, Any]]:
    """One torchrun job for `layouts` (all of one rank count); a result row per layout."""
    from tests.distributed import run_torchrun

    work = SMOKE if smoke else FULL
    ranks = {dp * tp * pp for dp, tp, pp in layouts}
    if len(ranks) != 1:
        raise ValueError(f"one torchrun job runs layouts of one rank count, not {sorted(ranks)}")
    out = directory / f"{'-'.join(_key(layout) for layout in layouts)}.json"
    target = ["-m", "benchmarks.engine.engine_3d", "--worker", *(",".join(map(str, layout)) for layout in layouts)]
    target += ["--steps", str(steps), "--out", str(out), *(["--smoke"] if smoke else [])]
    run_torchrun(target, nproc=ranks.pop(), timeout=900)
    gathered = json.loads(out.read_text())
    return [_row(layout, gathered[_key(layout)], work) for layout in layouts]


def _row(layout: Layout, records: list[dict[str, Any]], work: Workload) -> dict[str, Any]:
    dp, tp, pp = layout
    measured = max(record["params"] for record in records)
    predicted = predicted_rank_params(tp, pp, work)
    step_s = max(record["step_s"] for record in records)
    return {
        "layout": f"dp{dp} tp{tp} pp{pp}",
        "ranks": dp * tp * pp,
        "step_s": step_s,
        "max_rank_params": measured,
        "predicted_rank_params": predicted,
        "measured_over_predicted": round(measured / predicted, 4),
        "peak_rss_mib": [round(record["peak_rss_mib"]) for record in records],
        "tokens_per_s": round(dp * work.micro_batch * work.micro_batches * work.seq_len / step_s),
    }


def _layout(text: str) -> Layout:
    parts = text.split(",")
    if len(parts) != 3 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise argparse.ArgumentTypeError(f"a layout is dp,tp,pp (three positive integers), not {text!r}")
    dp, tp, pp = (int(part) for part in parts)
    return dp, tp, pp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--steps", type=int, default=None, help=f"timed steps per layout (default 4, smoke {SMOKE_STEPS})"
    )
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4], choices=sorted(LAYOUTS))
    parser.add_argument("--smoke", action="store_true", help="a tiny model, the 2-rank layouts in one job, one step")
    parser.add_argument("--worker", type=_layout, nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    steps = args.steps if args.steps is not None else SMOKE_STEPS if args.smoke else 4
    if steps < 1:
        parser.error("--steps must be at least 1")
    if args.worker:
        worker(args.worker, SMOKE if args.smoke else FULL, steps, args.out)
        return 0
    import tempfile

    # A full run gives each layout its own job, so that its peak RSS is its own; the smoke run shares one.
    jobs = [LAYOUTS[2]] if args.smoke else [[layout] for ranks in args.ranks for layout in LAYOUTS[ranks]]
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for layouts in jobs:
            for row in run_layouts(layouts, args.smoke, steps, Path(directory)):
                rows.append(row)
                if not args.json:
                    print(_format(row), flush=True)
    if args.json:
        work = SMOKE if args.smoke else FULL
        model = {**work.sizes, **{key: value for key, value in asdict(work).items() if key != "sizes"}}
        print(json.dumps({"model": model, "results": rows}, indent=1))
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
