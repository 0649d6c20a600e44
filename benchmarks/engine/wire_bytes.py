"""Benchmark (not a test): the bytes each rank hands to the wire per optimizer step, by gradient compression.

    python -m benchmarks.engine.wire_bytes [--out benchmarks/results/wire_bytes.json] [--smoke]

A torchrun job of 2 CPU ranks (gloo) for each (ZeRO stage, compression) pair (one for all under --smoke): our engine
(`backends.initialize`, engine.json's `hardware_selector.compression`) trains GPT-2 124M (the catalog's config,
fp32, Adam) while every torch.distributed collective the step calls is counted from the size of the tensor it is
handed, as a ring sends it (what one rank sends): an all-reduce 2(n-1)/n of its tensor, a reduce-scatter and an
all-to-all (n-1)/n of their input, an all-gather (n-1)/n of the gathered whole. The steps before the counted ones
are left out (onebit: 1-bit Adam's warm-up of exact sums). Beside the width of the gradient reduction (the bytes per
parameter of the tensors its collective moves) stands the planner's, which its bytes on the wire multiply: 4 for
fp32 gradients, 2 for bf16 or fp16, planner/gradient_compression.py's wire bytes for int8 and onebit (the figures
the plan's communication time uses, planner/throughput/compressed_reduction.py). The loss the compressed runs reach
is measured by tests/test_compressed_sum.py (the tiny GPT for 200 steps; docs/parallelism.md, "Gradient
compression"). On gloo a reduce-scatter runs as an all-reduce and a slice, and the parameters' all-gather as
broadcasts (backends/zero/comm.py): the table gives each collective's bytes as it ran. docs/performance.md, "Wire
bytes", quotes a run. `--smoke` counts the shrunken GPT-2's steps instead (seconds; no JSON unless --out).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

# (ZeRO stage, engine.json compression): fp32 and its 16-bit casts and int8 on ZeRO-1's reduce-scatter; 1-bit Adam
# on ZeRO-0 (the only stage it runs on) against ZeRO-0's plain fp32 all-reduce.
PAIRS = [(1, "none"), (1, "bf16"), (1, "fp16"), (1, "int8"), (0, "none"), (0, "onebit")]
# The collective that carries each pair's gradient sum on gloo (backends/zero/comm.py: a reduce-scatter is an
# all-reduce and a slice there, and the parameters' all-gather a broadcast of each rank's slice); for int8 and onebit
# the first phase of backends/parts/compressed_sum.py's sum.
REDUCTION = {"none": "all_reduce", "bf16": "all_reduce", "fp16": "all_reduce", "int8": "all_to_all_single",
             "onebit": "all_to_all_single"}  # fmt: skip
SCALAR_BYTES = 1024  # a collective of fewer bytes is a scalar's (loss, norm, overflow flag), not the reduction's
WARMUP_STEPS, COUNTED_STEPS, MICRO, SEQ = 2, 2, 1, 64
RESULTS = Path(__file__).resolve().parents[1] / "results" / "wire_bytes.json"


def _counted(name: str, args: tuple, kwargs: dict, world: int) -> tuple[int, int]:
    """(bytes one rank sends for this call as a ring sends them, the bytes of the whole tensor it moves)."""

    def size(tensor: Any) -> int:
        return tensor.numel() * tensor.element_size()

    if name == "all_reduce":
        whole = size(args[0])
        return 2 * (world - 1) * whole // world, whole
    if name == "broadcast":  # (n-1) copies of it leave its owner's ring: (n-1)/n of it per rank, on average
        whole = size(args[0])
        return (world - 1) * whole // world, whole
    if name in ("reduce_scatter_tensor", "all_to_all_single"):
        whole = size(kwargs.get("input", args[1]))
        return (world - 1) * whole // world, whole
    if name == "all_gather_into_tensor":
        whole = size(kwargs.get("input_tensor", args[1])) * world
        return (world - 1) * whole // world, whole
    if name == "all_gather":
        whole = size(args[1]) * world
        return (world - 1) * whole // world, whole
    return 0, 0


class WireCounter:
    """Counts the bytes handed to torch.distributed's collectives while `counting` is set, by collective."""

    NAMES = ("all_reduce", "reduce_scatter_tensor", "all_to_all_single", "all_gather_into_tensor", "all_gather",
             "broadcast")  # fmt: skip

    def __init__(self, world: int) -> None:
        import torch.distributed as dist

        self.world, self.counting = world, False
        self.sent: dict[str, int] = defaultdict(int)
        self.moved: dict[str, int] = defaultdict(int)
        self.scalar_bytes = 0
        for name in self.NAMES:
            setattr(dist, name, self._wrapped(name, getattr(dist, name)))

    def reset(self) -> None:
        self.sent.clear()
        self.moved.clear()
        self.scalar_bytes = 0

    def _wrapped(self, name: str, collective: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            if self.counting:
                sent, moved = _counted(name, args, kwargs, self.world)
                if moved < SCALAR_BYTES:
                    self.scalar_bytes += sent
                else:
                    self.sent[name] += sent
                    self.moved[name] += moved
            return collective(*args, **kwargs)

        return counted


def _pair(stage: int, mode: str, counter: WireCounter, smoke: bool) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    import backends
    from backends.weights.model_factory import build_causal_lm, catalog_config, tiny_config

    config = tiny_config(catalog_config("gpt2")) if smoke else catalog_config("gpt2")
    engine_config = {
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-4}},
        "zero_optimization": {"stage": stage},
        # onebit: 1-bit Adam's exact warm-up (its freeze_step) ends before the counted steps.
        "hardware_selector": {"compression": mode, "compression_warmup_steps": 1 if mode == "onebit" else 0},
    }
    engine, *_ = backends.initialize(model=build_causal_lm(config, seed=0), config=engine_config)
    generator = torch.Generator().manual_seed(dist.get_rank())
    counter.reset()
    for step in range(WARMUP_STEPS + COUNTED_STEPS):
        counter.counting = step >= WARMUP_STEPS
        engine.train_batch(torch.randint(0, config["vocab_size"], (MICRO, SEQ), generator=generator))
    counter.counting = False
    parameters = sum(p.numel() for p in engine.module.parameters())
    sent = {name: total // COUNTED_STEPS for name, total in sorted(counter.sent.items())}
    # The width on the wire: the bytes per parameter of the tensors the reduction's collective moves (onebit:
    # per compressed step, its momentum; the other modes: the gradient).
    width = counter.moved[REDUCTION[mode]] / COUNTED_STEPS / parameters
    planned, source = _planned_bytes_per_element(mode)
    return {
        "stage": stage,
        "compression": mode,
        "parameters": parameters,
        "sent_bytes_per_step_by_collective": sent,
        "sent_bytes_per_step": sum(sent.values()) + counter.scalar_bytes // COUNTED_STEPS,
        "reduction_collective": REDUCTION[mode],
        "bytes_per_parameter": width,
        "planned_bytes_per_parameter": planned,
        "planned_source": source,
        "measured_over_planned": width / planned,
    }


def _planned_bytes_per_element(mode: str) -> tuple[float, str]:
    from planner.contract.choices import GradientCompression
    from planner.gradient_compression import wire_bytes, wire_source

    if mode in ("int8", "onebit"):
        compression = GradientCompression(mode)
        return wire_bytes(compression), wire_source(compression)
    size = 4.0 if mode == "none" else 2.0
    return size, f"the gradient dtype's size ({'fp32' if mode == 'none' else mode}: {size:g} bytes)"


def rank_main(out: str, pairs: str, smoke: bool) -> None:
    """One rank of a job over `pairs` (`STAGE:MODE,...`) in turn, rank 0 writing their results."""
    import torch.distributed as dist

    from planner.files import write_json_atomic

    dist.init_process_group("gloo")
    counter = WireCounter(dist.get_world_size())
    results = [_pair(int(pair.split(":")[0]), pair.split(":")[1], counter, smoke) for pair in pairs.split(",")]
    if dist.get_rank() == 0:
        write_json_atomic(out, results)
    dist.barrier()
    dist.destroy_process_group()


def _table(results: dict) -> str:
    lines = [
        "| ZeRO | compression | bytes per parameter on the wire | planned | measured / planned | sent per rank "
        "per step | by collective |",
        "|---|---|---|---|---|---|---|",
    ]
    for pair in results["pairs"]:
        collectives = ", ".join(
            f"{name} {sent / 2**20:,.2f}" for name, sent in pair["sent_bytes_per_step_by_collective"].items()
        )
        lines.append(
            f"| {pair['stage']} | {pair['compression']} | {pair['bytes_per_parameter']:.4g} | "
            f"{pair['planned_bytes_per_parameter']:.4g} | {pair['measured_over_planned']:.4f} | "
            f"{pair['sent_bytes_per_step'] / 2**20:,.2f} MiB | {collectives} (MiB) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", default=None, help=f"JSON results (default: {RESULTS}, not with --smoke)")
    parser.add_argument("--smoke", action="store_true", help="the shrunken GPT-2, a check that the job runs")
    parser.add_argument("--rank-job", nargs=2, default=None, help=argparse.SUPPRESS)  # OUT STAGE:MODE,...: a launch's
    args = parser.parse_args(argv)
    if args.rank_job is not None:
        rank_main(args.rank_job[0], args.rank_job[1], args.smoke)
        return 0
    from benchmarks.harness.processes import run_torchrun_command

    # A launch per pair: a freed engine's memory stays with its process (the C heap keeps it), and two GPT-2s with
    # their Adam states do not fit beside each other twice over. --smoke's tiny ones share one launch.
    batches = [PAIRS] if args.smoke else [[pair] for pair in PAIRS]
    pairs = []
    with tempfile.TemporaryDirectory(prefix="wire-bytes-") as folder:
        for number, batch in enumerate(batches):
            job = str(Path(folder) / f"job{number}.json")
            listed = ",".join(f"{stage}:{mode}" for stage, mode in batch)
            command = ["-m", "benchmarks.engine.wire_bytes", "--rank-job", job, listed]
            code, tail = run_torchrun_command([*command, *(["--smoke"] if args.smoke else [])], 2, 3600)
            if code != 0:
                print(f"error: the job of {listed} failed (exit {code}): {tail[-2000:]}", file=sys.stderr)
                return 1
            pairs += json.loads(Path(job).read_text())
    results = {"pairs": pairs, "world": 2, "smoke": args.smoke, "model": "gpt2", "micro_batch": MICRO, "seq_len": SEQ}
    results["command"] = "python -m benchmarks.engine.wire_bytes " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    out = args.out or (None if args.smoke else str(RESULTS))
    if out:
        from planner.files import write_json_atomic

        write_json_atomic(out, results)
    print(_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
