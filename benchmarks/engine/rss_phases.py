"""Diagnostic (not a test): peak RSS and glibc's kept heap per phase of a ZeRO step, for one bucket size.

Trains GPT-2 124M (fp32, AdamW, clipping 1.0, micro-batch 2 x 128 tokens) with
our ZeroOptimizer on the ranks torchrun gives (gloo), and prints, per step and
phase, the resident set's high-water mark since the previous point (VmHWM,
reset by writing "5" to /proc/self/clear_refs), the resident set at the point,
and glibc's free-but-kept heap bytes (mallinfo2's fordblks). Run it once with
the runner's DeepSpeed-sized buckets and once with one large bucket to see
which phase the small buckets make heavier (docs/performance.md, "Engine vs
peers"):

    python -m torch.distributed.run --nproc-per-node=2 -m benchmarks.engine.rss_phases --bucket 589824 --stage 1

--trim b125,reduced also calls malloc_trim(0) at those points (bN: when the
Nth parameter's gradient arrives), to see what glibc's kept pages weigh (the
engine does not trim: docs/performance.md says what a trim saved and cost).
Files go to $RSS_PHASES_OUT (default: here), one JSON per rank; --smoke runs a
2-layer GPT-2 for one step in one process and prints its JSON instead.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import time
from pathlib import Path
from typing import Any


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


LIBC = ctypes.CDLL("libc.so.6")
LIBC.mallinfo2.restype = _Mallinfo2
MIB = 2**20


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


class Trace:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.step = -1
        self.trim_at: set[str] = set()

    def reset(self) -> None:
        Path("/proc/self/clear_refs").write_text("5")

    def point(self, phase: str) -> None:
        info = LIBC.mallinfo2()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.rows.append(
            {
                "step": self.step,
                "phase": phase,
                "hwm": _status("VmHWM") / MIB,
                "rss": _status("VmRSS") / MIB,
                "heap_free": info.fordblks / MIB,
                "heap_arena": info.arena / MIB,
                "mmapped": info.hblkhd / MIB,
                "minor_faults": usage.ru_minflt,
                "cpu": usage.ru_utime + usage.ru_stime,
                "time": time.perf_counter(),
            }
        )
        self.reset()
        if phase in self.trim_at:
            LIBC.malloc_trim(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bucket", type=int, default=589_824)
    parser.add_argument("--stage", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--every", type=int, default=25, help="a backward point every this many parameters")
    parser.add_argument("--trim", default="", help="malloc_trim(0) at these points: comma-separated phases, or bN")
    parser.add_argument("--smoke", action="store_true", help="a 2-layer GPT-2, one step, one process; print the JSON")
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist
    from transformers import GPT2Config, GPT2LMHeadModel

    from backends.parts.mixed_precision import LossScaler, compute_dtype
    from backends.zero import zero_optimizer_class
    from backends.zero.comm import DataParallelComm
    from planner.contract.engine_config import EngineConfig

    if args.smoke and "RANK" not in os.environ:  # one rank in this process, no launcher
        dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    else:
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    sizes = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 512, "n_positions": 128} if args.smoke else {}
    steps = 1 if args.smoke else args.steps
    model = GPT2LMHeadModel(GPT2Config(**sizes))
    config = EngineConfig.model_validate(
        {
            "zero_optimization": {"stage": args.stage, "reduce_bucket_size": args.bucket},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
            "gradient_clipping": 1.0,
        }
    )
    zero = zero_optimizer_class(args.stage)(
        model, config, DataParallelComm(), compute_dtype(config), LossScaler(config)
    )
    trace = Trace()
    publish = zero.publish_parameters
    zero.publish_parameters = lambda: (trace.point("optimizer"), publish())  # a point between step and gather
    trace.trim_at = {item.replace("b", "backward ", 1) if item[1:].isdigit() else item for item in args.trim.split(",")}
    arrived = [0]

    def on_grad(_param: Any) -> None:
        arrived[0] += 1
        if arrived[0] % args.every == 0:
            trace.point(f"backward {arrived[0]}")

    for param in model.parameters():
        param.register_post_accumulate_grad_hook(on_grad)
    vocab = model.config.vocab_size
    tokens = torch.randint(0, vocab, (2, 128), generator=torch.Generator().manual_seed(rank))
    for step in range(steps + 1):
        trace.step = step
        if step == 1:  # the benchmark resets after its warm-up step
            import gc

            gc.collect()
            LIBC.malloc_trim(0)
        arrived[0] = 0
        trace.point("start")
        zero.begin_forward()
        loss = model(tokens, labels=tokens).loss
        trace.point("forward")
        zero.begin_backward(True)
        loss.backward()
        trace.point("backward end")
        zero.end_backward(True)
        trace.point("reduced")
        zero.step()
        trace.point("gathered")
        zero.zero_grad()
    peak = max(row["hwm"] for row in trace.rows if row["step"] >= 1)
    out = {"rank": rank, "bucket": args.bucket, "units": len(zero.units), "peak_after_warmup": peak}
    out["rows"] = trace.rows
    if args.smoke:
        print(json.dumps(out))
    else:
        Path(os.environ.get("RSS_PHASES_OUT", ".")).joinpath(
            f"rss_{args.bucket}{args.trim.replace(',', '_')}_r{rank}.json"
        ).write_text(json.dumps(out))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
