"""The command line of the tool this project replaces, kept working:

    python hardware_selector.py --model-family text_generation --model-name llama-7b \
        --batch-size 16 --mode training --distributed --gpu-count 8 --max-memory-gb 24

It prints the recommended training setup (or JSON with --json). The Typer
subcommands (`plan`, `estimate`, ...) are the full interface; this one answers
through the same search (planner/selector/, docs/selector.md). --batch-size is
the per-GPU batch, as it always was; the effective batch is batch x GPUs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from planner.errors import UserInputError

if TYPE_CHECKING:
    import argparse

# The API's keyword -> the flag that gives it, for errors in this command's words (--seq-len is the serving
# context too).
ARGUMENT_FLAGS = {
    "model_family": "--model-family", "model_name": "--model-name", "batch_size": "--batch-size",
    "gpu_count": "--gpu-count", "max_memory_gb": "--max-memory-gb", "gpu": "--gpu", "seq_len": "--seq-len",
    "context": "--seq-len", "nvme_gb": "--nvme-gb", "nvme_gbps": "--nvme-gbps", "db": "--db",
    "calibrate": "--no-calibration",
}  # fmt: skip
SEED_FLAGS = ("--model-family", "--model-name", "--mode", "--gpu-count", "--max-memory-gb", "--batch-size")


def is_seed_invocation(argv: Sequence[str]) -> bool:
    """True when the arguments are the legacy flags rather than a subcommand."""
    return bool(argv) and any(arg.split("=", 1)[0] in SEED_FLAGS for arg in argv) and not argv[0][:1].isalpha()


def seed_help() -> str:
    """The seed interface's flags, as `--help` prints them after the commands: without this they showed only
    with `--model-family F --model-name M --help`."""
    return (
        "\nOr, without a command, the interface of the tool this project replaces (one recommendation through the "
        "same search; docs/selector.md):\n\n" + _parser().format_help()
    )


def _program() -> str:
    """How the user started the program, for the help line: the console script or the file."""
    return "python hardware_selector.py" if sys.argv[0].endswith(".py") else "hardware-selector"


def _refuse_unknown_flags(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """A misspelt flag (`--model-famly`) is named, with the flag meant: argparse reports a missing required flag
    first ("the following arguments are required: --model-family"), which hides the typo."""
    import difflib

    known = set(parser._option_string_actions)  # argparse keeps no public list of its options
    for token in argv:
        flag = token.split("=", 1)[0]
        if flag.startswith("--") and not any(name.startswith(flag) for name in known):  # argparse takes prefixes
            names = sorted(name.removeprefix("--") for name in known if name.startswith("--"))
            close = difflib.get_close_matches(flag.removeprefix("--"), names, n=1)  # the dashes match every flag
            meant = f" (did you mean --{close[0]}?)" if close else ""
            parser.error(f"unknown option {flag}{meant}")


def _parser() -> argparse.ArgumentParser:
    import argparse  # here: every start-up checks is_seed_invocation, and only the seed flags are parsed with it

    class _OneLineParser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # argparse prints usage and exits; we print one line
            raise UserInputError(f"{message}; run '{_program()} --model-family F --model-name M --help'")

    parser = _OneLineParser(prog="hardware_selector.py", description="Recommend a distributed training setup.")
    parser.add_argument("--model-family", required=True, help="text_generation, text_classification, seq2seq, ...")
    parser.add_argument("--model-name", required=True, help="Catalog name, HF id or legacy name (llama-7b).")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=8,
        help="Sequences per GPU; the effective batch is this x the GPU count (default: 8).",
    )
    parser.add_argument(
        "--mode",
        default="training",
        help="training or inference (--batch-size: concurrent requests; default: training).",
    )
    parser.add_argument("--distributed", action="store_true", help="Use --gpu-count GPUs (else one).")
    parser.add_argument("--gpu-count", type=int, default=1, help="GPUs, with --distributed (default: 1).")
    parser.add_argument("--max-memory-gb", type=float, default=None, help="Plan for a GPU of this memory (GiB).")
    parser.add_argument("--gpu", default=None, help="Target GPU (default: chosen from --max-memory-gb).")
    parser.add_argument(
        "--seq-len", type=int, default=None, help="Tokens per sequence (default: the smaller of 2048 and the context)."
    )
    parser.add_argument(
        "--nvme-gb", type=float, default=None, help="NVMe per node (GiB): lets training offload to it (ZeRO-Infinity)."
    )
    parser.add_argument(
        "--nvme-gbps", type=float, default=None, help="That NVMe's read/write GB/s per node (default: an assumed 6)."
    )
    parser.add_argument(
        "--db",
        default=None,
        help="Benchmark database to calibrate with (default: $HARDWARE_SELECTOR_DB or the cache dir).",
    )
    parser.add_argument(
        "--no-calibration", action="store_true", help="Ignore benchmark records: analytical estimates only."
    )
    parser.add_argument("--json", action="store_true", help="Print the recommendation as JSON.")
    return parser


def _print_recommendation(result: dict) -> None:
    if not result["fits"]:
        print(f"No training setup fits {result['gpu_count']} x {_gpu(result)}.")
        for line in result["suggestions"]:
            print(f"  - {line}")
        return
    memory = result["estimated_memory"]
    strategy = result["strategy_family"]
    if strategy != result["distributed_strategy"]:
        strategy += f" ({result['distributed_strategy']})"
    print(f"Recommended: {strategy} on {result['gpu_count']} x {_gpu(result)}")
    print(
        f"  per-GPU batch {result['per_gpu_batch_size']}, gradient accumulation {result['gradient_accumulation_steps']}, "
        f"effective batch {result['effective_batch_size']} of {result['sequence_length']} tokens, "
        f"mixed precision {result['mixed_precision_dtype'] or 'off'}, "
        f"gradient checkpointing {'on' if result['gradient_checkpointing'] else 'off'}"
    )
    print(
        f"  memory per GPU: {memory['per_gpu_gb']:.1f} GiB at its peak ({memory['peak_phase']}: parameters "
        f"{memory['parameters_gb']:.1f}, gradients {memory['gradients_gb']:.1f}, optimizer {memory['optimizer_gb']:.1f}); "
        f"activations {memory['activations_gb']:.1f} GiB at their own peak"
    )
    if memory["nvme_per_node_gb"]:
        print(f"  NVMe per node: {memory['nvme_per_node_gb']:.1f} GiB offloaded (ZeRO-Infinity)")
    print(f"  throughput {result['calibration']}")
    for key in ("batch_note", "engine_reason"):
        if key in result:
            print(f"  note: {result[key]}")
    for key in ("deepspeed_config", "fsdp_config", "engine_config"):
        if key in result:
            block = {name: value for name, value in result[key].items() if name != "ds_config"}
            print(f"  {key}: {json.dumps(block)}")
    for reason in result["reasons"]:
        print(f"  - {reason}")


def _gpu(result: dict) -> str:
    """The answer's GPU, with the --max-memory-gb cap it was planned under ("V100-16GB capped at 2 GiB by ...")."""
    return result.get("gpu_memory_cap", result["gpu"])


def _selector():
    """The Python API, its suggestions naming this command's flags (--distributed --gpu-count N, --batch-size)."""
    from benchmarks_db.calibrate import plan_calibration
    from planner.selector import HardwareSelector
    from planner.selector.calibration import install_calibration_source
    from planner.selector.serving import SEED_SERVING_FLAGS
    from planner.selector.training import SEED_FLAGS

    install_calibration_source(plan_calibration)  # its recommendation calibrates as `plan`'s does

    class SeedSelector(HardwareSelector):
        training_flags = SEED_FLAGS
        serving_flags = SEED_SERVING_FLAGS
        selection_serving_flags = SEED_SERVING_FLAGS
        argument_names = ARGUMENT_FLAGS

    return SeedSelector()


def _serve(args: argparse.Namespace) -> int:
    result = _selector().get_inference_config(
        args.model_family,
        args.model_name,
        gpu_count=args.gpu_count if args.distributed else 1,
        batch_size=args.batch_size,
        max_memory_gb=args.max_memory_gb,
        gpu=args.gpu,
        context=args.seq_len,
    )
    if args.json:
        printable = {key: value for key, value in result.items() if key != "plan"}
        printable["plan"] = result["plan"].model_dump(mode="json") if result["plan"] is not None else None
        print(json.dumps(printable, indent=2))
        return 0 if result["fits"] else 1
    if not result["fits"]:
        print(f"Nothing serves this on {result['gpu_count']} x {_gpu(result)}.")
        for line in result["suggestions"]:
            print(f"  - {line}")
        return 1
    memory, latency = result["estimated_memory"], result["estimated_latency"]
    print(
        f"Recommended: {result['distributed_strategy']} (TP {result['tensor_parallel']}, PP "
        f"{result['pipeline_parallel']}, {result['replicas']} replica(s)) on {result['gpu_count']} x {_gpu(result)}"
    )
    print(
        f"  memory per GPU: {memory['per_gpu_gb']:.1f} GiB (weights {memory['weights_gb']:.1f}, KV cache "
        f"{memory['kv_cache_gb']:.1f}); holds {result['max_concurrent_requests']} concurrent requests"
    )
    print(
        f"  time to first token {latency['ttft_ms']:,.0f} ms, between tokens {latency['itl_ms']:.1f} ms, "
        f"{result['estimated_throughput']['tokens_per_s']:,.0f} tokens/s"
    )
    for reason in result["reasons"]:
        print(f"  - {reason}")
    return 0


def seed_main(argv: Sequence[str]) -> int:
    parser = _parser()
    _refuse_unknown_flags(parser, list(argv))
    args = parser.parse_args(list(argv))
    mode = args.mode.strip().lower()
    if mode not in ("training", "inference"):
        raise UserInputError(f"--mode must be training or inference, not '{args.mode}'")
    if args.gpu_count != 1 and not args.distributed:  # it was dropped without a word: the plan is for one GPU
        raise UserInputError(f"--gpu-count {args.gpu_count} needs --distributed (without it the plan is for one GPU)")
    if mode == "inference":
        if args.nvme_gb is not None or args.nvme_gbps is not None:
            raise UserInputError("--nvme-gb and --nvme-gbps plan training's offload; drop them or use --mode training")
        if args.db is not None or args.no_calibration:
            raise UserInputError(
                "--db and --no-calibration calibrate training's throughput; drop them or use --mode training"
            )
        return _serve(args)
    result = _selector().get_distributed_training_config(
        args.model_family,
        args.model_name,
        gpu_count=args.gpu_count if args.distributed else 1,
        batch_size=args.batch_size,
        max_memory_gb=args.max_memory_gb,
        gpu=args.gpu,
        seq_len=args.seq_len,
        nvme_gb=args.nvme_gb,
        nvme_gbps=args.nvme_gbps,
        calibrate=not args.no_calibration,
        db=args.db,
    )
    if args.json:
        printable = {key: value for key, value in result.items() if key != "plan"}
        printable["plan"] = result["plan"].model_dump(mode="json") if result["plan"] is not None else None
        print(json.dumps(printable, indent=2))
    else:
        _print_recommendation(result)
    return 0 if result["fits"] else 1


def run(argv: Sequence[str]) -> int:
    """seed_main with the CLI's error convention: one line on stderr, exit code 2."""
    from pydantic import ValidationError

    try:
        return seed_main(argv)
    except (UserInputError, ValidationError) as error:
        from .app import validation_message

        print(f"error: {validation_message(error) if isinstance(error, ValidationError) else error}", file=sys.stderr)
        return 2
