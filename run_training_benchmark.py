"""run-training-benchmark: generate a benchmark matrix, run it, record it.

    python run_training_benchmark.py --list-models
    python run_training_benchmark.py --model bert-base-uncased --distributed --max-gpus 4 --output bert_benchmark.json
    python run_training_benchmark.py --model t5-small --hardware cuda rocm --distributed --max-gpus 8
    python run_training_benchmark.py --model gpt2 --tiny --hardware cpu --distributed --max-gpus 2 --run

Generation is planning only (no torch): strategies x GPU counts x micro-batches
x activation checkpointing, pruned by the planner's memory estimate, each
config with its predicted memory and throughput, as JSON. `--run` measures the
matrix on this machine, the configs of one GPU count in one launch, and records
every result in the benchmark database (see `hardware-selector db`), resuming
where an interrupted run stopped (docs/benchmarks.md, "Running a matrix").
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent
if str(REPO_ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO_ROOT))

from planner.errors import UserInputError  # noqa: E402

TINY_SEQ_LEN = 32  # what `backends.run --tiny` trains (backends/run.py)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like the rest of the CLI
        print(f"error: {message}; run '{self.prog} --help'", file=sys.stderr)
        raise SystemExit(2)


def _count(low: int, high: int = 1 << 20):
    """An argparse type: a whole number in [low, high], else argparse's one line names the flag and the range."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low}..{high}")
        return value

    return parse


MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week per config: past it, a typo (1e20 overflowed the process poll)
RUN_DEFAULTS = {"steps": 8, "warmup": 2, "timeout": 600.0}  # applied after check_flags, which must see None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):  # nan fails this too
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    if value > MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"{text} seconds is more than a week ({MAX_TIMEOUT_S:.0f} s)")
    return value


def check_flags(args: argparse.Namespace) -> None:
    """A flag that cannot apply to what was asked is an error, not dropped; a path written later is checked now,
    before the matrix is described (docs/benchmarks.md)."""
    measuring = [flag for name, flag in (("steps", "--steps"), ("warmup", "--warmup"), ("timeout", "--timeout"),
                 ("retry_failed", "--retry-failed"), ("db", "--db")) if getattr(args, name) not in (None, False)]  # fmt: skip
    if measuring and not args.run:
        verb, them = ("applies", "it") if len(measuring) == 1 else ("apply", "them")
        raise UserInputError(f"{', '.join(measuring)} {verb} to measuring the matrix; add --run, or drop {them}")
    counts = [flag for name, flag in (("max_gpus", "--max-gpus"), ("gpus_per_node", "--gpus-per-node"))
              if getattr(args, name) is not None]  # fmt: skip
    if counts and not args.distributed:
        raise UserInputError(f"{', '.join(counts)} shape the GPU counts of --distributed; add it, or drop them")
    if args.output is not None:
        from planner.files import check_writable

        check_writable(args.output)
    if args.db is not None:
        from benchmarks_db.paths import check_db_path

        check_db_path(args.db.expanduser())
    for name, value in RUN_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def build_parser() -> argparse.ArgumentParser:
    from benchmarks.harness.matrix import DEFAULT_STRATEGIES, STRATEGY_FIELDS
    from benchmarks.harness.targets import HARDWARE_KINDS

    parser = _Parser(
        prog="run-training-benchmark",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--list-models", action="store_true", help="list the catalog models and exit")
    parser.add_argument("--model", help="catalog model name, HF id or alias")
    parser.add_argument(
        "--hardware",
        nargs="+",
        choices=HARDWARE_KINDS,
        metavar="KIND",
        help=f"hardware kinds to target: {', '.join(HARDWARE_KINDS)} (default: the GPUs here; without any, cuda's default GPU, or the CPU with --run)",
    )
    parser.add_argument("--gpu", help="target this catalog GPU (one --hardware only)")
    parser.add_argument("--distributed", action="store_true", help="GPU counts 1, 2, 4, ... up to --max-gpus")
    parser.add_argument(
        "--max-gpus", type=_count(1, 1 << 16), default=None, help="largest GPU count (default 8; 2 on cpu)"
    )
    parser.add_argument(
        "--gpus-per-node", type=_count(1, 1 << 10), default=None, help="GPUs per node for counts above it (default 8)"
    )
    parser.add_argument(
        "--strategies",
        nargs="+",
        default=DEFAULT_STRATEGIES,
        metavar="NAME",
        help=f"from {', '.join(STRATEGY_FIELDS)} (default: {' '.join(DEFAULT_STRATEGIES)})",
    )
    parser.add_argument("--micro-batches", nargs="+", type=_count(1, 1 << 16), default=[1, 2, 4, 8], metavar="N")
    parser.add_argument(
        "--checkpointing", nargs="+", default=["none", "full"], choices=["none", "selective", "op", "full"]
    )
    parser.add_argument(
        "--seq-len", type=_count(1, 1 << 22), default=None, help="tokens per sequence (default 512, 32 with --tiny)"
    )
    parser.add_argument(
        "--precision",
        default=None,
        choices=["fp32", "bf16-mixed", "fp16-mixed"],
        help="default bf16-mixed; fp32 on cpu",
    )
    parser.add_argument("--tiny", action="store_true", help="the model's architecture at tiny sizes (CPU runs, tests)")
    parser.add_argument("--output", type=Path, help="write the matrix JSON here (atomically) instead of stdout")
    parser.add_argument("--run", action="store_true", help="measure the matrix here and record it in the database")
    parser.add_argument("--steps", type=_count(1, 1 << 20), help="measured steps per config (default 8)")
    parser.add_argument("--warmup", type=_count(0, 1 << 20), help="unmeasured steps first (default 2)")
    parser.add_argument(
        "--timeout",
        type=_seconds,
        help="seconds each config may take before it is killed (default 600); configs of one GPU count share a "
        "launch, so each counts from the end of the one before it, the first's with the launch's start-up",
    )
    parser.add_argument("--retry-failed", action="store_true", help="re-run configs recorded as oom/error/timeout")
    parser.add_argument("--db", type=Path, help="benchmark database (default: $HARDWARE_SELECTOR_DB or the cache dir)")
    return parser


def list_models() -> None:
    from planner.models.catalog import load_catalog
    from planner.units import format_count

    lines = [
        f"{spec.name:<22} {format_count(spec.params.total):>8}  {spec.family.value:<16} {spec.hf_id or ''}"
        for spec in sorted(load_catalog(), key=lambda s: s.params.total)
    ]
    try:
        print("\n".join(lines))
    except BrokenPipeError:  # `| head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (replaces stdout for the rest of the process)


def model_spec(name: str, tiny: bool):
    from planner.models.resolve import resolve_model

    spec = resolve_model(name)
    if not tiny:
        return spec
    from backends.weights.model_factory import catalog_config, tiny_config
    from planner.models.hf_config import spec_from_hf_config

    return spec_from_hf_config(tiny_config(catalog_config(spec.name)), name=spec.name, origin="tiny")


def default_hardware(run: bool) -> list[str]:
    """A GPU kind: the one here, else cuda's default GPU for planning; a run without GPUs measures the CPU."""
    from planner.hardware.detect import detect_hardware

    report = detect_hardware()
    if report.cpu_only:
        return ["cpu"] if run else ["cuda"]
    from planner.hardware.gpus import find_gpu

    vendors = {spec.vendor for spec in (find_gpu(gpu.catalog_name or gpu.name) for gpu in report.gpus) if spec}
    return ["rocm"] if vendors == {"amd"} else ["cuda"]


def generate(args, spec) -> list:
    from benchmarks.harness.matrix import generate_matrix, gpu_counts_up_to
    from benchmarks.harness.targets import choose_target

    hardware = args.hardware or default_hardware(args.run)
    if args.gpu and len(hardware) > 1:
        raise UserInputError("--gpu names one GPU; give a single --hardware with it")
    matrices = []
    for kind in hardware:
        target = choose_target(kind, args.gpu)
        if args.run and not target.local:
            raise UserInputError(
                f"--run measures this machine, which has no {target.gpu} ({kind}); use --hardware "
                "cpu here, or run on the target machine"
            )
        max_gpus = args.max_gpus or (2 if kind == "cpu" else 8)
        counts = gpu_counts_up_to(max_gpus) if args.distributed else [1]
        precision = args.precision or ("fp32" if kind == "cpu" else "bf16-mixed")
        seq_len = args.seq_len or min(TINY_SEQ_LEN if args.tiny else 512, spec.max_position_embeddings)
        if args.run and args.tiny and seq_len > TINY_SEQ_LEN:
            raise UserInputError(
                f"the runner's --tiny trains {TINY_SEQ_LEN}-token sequences; use --seq-len {TINY_SEQ_LEN} or less"
            )
        if kind == "cpu" and args.gpus_per_node is not None:
            raise UserInputError("--gpus-per-node: cpu ranks are processes on this one machine; drop it")
        per_node = max_gpus if kind == "cpu" else args.gpus_per_node or 8
        matrix = generate_matrix(
            spec,
            hardware=kind,
            gpu=target.gpu,
            gpu_note=target.note,
            gpu_counts=counts,
            gpus_per_node=per_node,
            strategies=args.strategies,
            micro_batches=args.micro_batches,
            checkpointing=args.checkpointing,
            seq_len=seq_len,
            precision=precision,
            tiny=args.tiny,
        )
        matrices.append((target, matrix))
    return matrices


def run(args, target, matrix) -> int:
    from rich.console import Console

    from benchmarks.harness.runner import run_matrix
    from benchmarks_db.environment import current_environment
    from benchmarks_db.store import BenchmarkStore
    from planner.progress import WorkProgress

    store = BenchmarkStore(args.db)
    console = Console(stderr=True)
    done = store.done_matrix_keys(retry_failed=args.retry_failed)
    todo = [entry for entry in matrix.entries if entry.key not in done]
    console.print(f"{len(matrix.entries)} configs, {len(matrix.entries) - len(todo)} already in {store.path}")
    with WorkProgress("benchmarking", total=len(todo)) as progress:

        def advance(entry, status) -> None:
            progress.advance(note=f"{entry.label}: {status.value}")

        received: list[int] = []  # SIGTERM, when that was the stop: the exit code says which (128 + the signal)
        try:
            with _sigterm_as_interrupt(received):
                summary = run_matrix(
                    matrix,
                    store,
                    current_environment(target.driver),
                    steps=args.steps,
                    warmup=args.warmup,
                    timeout_s=args.timeout,
                    retry_failed=args.retry_failed,
                    on_progress=advance,
                    on_start=progress.set_total,
                )
        except KeyboardInterrupt:
            console.print(f"stopped: what ended before it is in {store.path}; run the same command again to resume")
            return 128 + (received[0] if received else signal.SIGINT)  # 130 Ctrl-C, 143 SIGTERM, as a shell says
    counts = ", ".join(f"{n} {status}" for status, n in sorted(summary.recorded.items())) or "nothing new"
    console.print(
        f"recorded {counts} in {store.path} ({summary.skipped_done} already done; measured by {summary.runner})"
    )
    return 0


@contextmanager
def _sigterm_as_interrupt(received: list[int]) -> Iterator[None]:
    """SIGTERM (`kill`, a scheduler) stops the matrix as Ctrl-C does: the launch's process tree is killed (its
    ranks run in a session of their own and would live on) and the configs that ended are recorded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def describe(console, target, matrix) -> None:
    console.print(f"[bold]{matrix.model}[/] on {target.hardware}: {matrix.gpu_note}")
    console.print(
        f"  {len(matrix.entries)} configs fit, {len(matrix.pruned)} pruned "
        f"(seq_len {matrix.seq_len}, {matrix.precision}{', tiny' if matrix.tiny else ''})"
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.list_models:
            list_models()
            return 0
        if not args.model:
            raise UserInputError("--model is required (see --list-models)")
        check_flags(args)
        from rich.console import Console

        from planner.files import write_json_atomic

        spec = model_spec(args.model, args.tiny)
        matrices = generate(args, spec)
        console = Console(stderr=True)
        for target, matrix in matrices:
            describe(console, target, matrix)
        document = {
            "tool": "run-training-benchmark",
            "matrices": [matrix.model_dump(mode="json") for _, matrix in matrices],
        }
        if args.output:
            write_json_atomic(args.output, document)
            console.print(f"wrote {args.output}")
        elif not args.run:
            print(json.dumps(document, indent=2))
        if args.run:
            if len(matrices) != 1:
                raise UserInputError("--run measures one hardware kind at a time; give a single --hardware")
            return run(args, *matrices[0])
        return 0
    except UserInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
