"""Example training script: train the causal LM of a run folder with the backend its plan names.

    python backends/train.py --plan DIR [--tiny] [--steps N] [--mode auto|ddp|deepspeed|accelerate|trainer]

It is what the emitted launch.sh runs by default (under torchrun, `accelerate
launch` or the DeepSpeed launcher), so every emitted folder runs end to end;
swap in your own script with TRAIN_SCRIPT=... bash launch.sh. The model is
built from the config stored in plan.json (random init, no hub access;
`--tiny` keeps the architecture and shrinks it), the data are synthetic
tokens. Rank 0 prints one line `TRAIN_RESULT {json}` at the end.

Modes: ddp = torch DDP; deepspeed = deepspeed.initialize with ds_config.json;
accelerate = an Accelerator configured by accelerate_config.yaml (FSDP or
DeepSpeed); trainer = transformers.Trainer with training_arguments(plan);
auto = the plan's own (engine plans run `python -m backends.run`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

if __package__ in (None, ""):
    # Run as a script, Python puts backends/ first on sys.path, where our adapter
    # modules (deepspeed.py, ...) would shadow the libraries of the same name.
    _HERE = Path(__file__).resolve().parent
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != _HERE]
    sys.path.insert(0, str(_HERE.parent))

from backends.cpu_distributed import runs_on_cpu_instead  # noqa: E402
from backends.data import SyntheticTokens, micro_batches  # noqa: E402
from backends.model_factory import build_causal_lm, tiny_config  # noqa: E402
from planner.emit.plan_json import read_plan_file  # noqa: E402
from planner.emit.target import RunTarget  # noqa: E402
from planner.errors import UserInputError  # noqa: E402
from planner.plan import Plan  # noqa: E402

MODES = ("auto", "ddp", "deepspeed", "accelerate", "trainer")
# Set by `accelerate launch` (and only by it) from the YAML's distributed_type.
_ACCELERATE_LAUNCH_FLAGS = ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DYNAMO_BACKEND")
TINY_SEQ_LEN = 32


@dataclass
class TrainRun:
    """Everything a training mode needs, resolved from the run folder and the command line."""

    plan: Plan
    target: RunTarget
    run_dir: Path
    hf_config: dict
    steps: int
    seq_len: int
    seed: int
    output_dir: Path

    @property
    def micro_steps(self) -> int:
        return self.steps * self.target.grad_accum

    @property
    def vocab_size(self) -> int:
        return int(self.hf_config["vocab_size"])

    def build_model(self) -> Any:
        return build_causal_lm(self.hf_config, seed=self.seed)

    def dataset(self) -> SyntheticTokens:
        size = self.micro_steps * self.target.micro_batch * self.target.data_parallel
        return SyntheticTokens(size, self.seq_len, self.vocab_size, seed=self.seed)

    def batches(self, rank: int, world: int):
        """This rank's micro-batches, as {"input_ids", "labels"} dicts of CPU tensors."""
        stream = micro_batches(
            self.dataset(), micro_batch=self.target.micro_batch, rank=rank, world=world, seed=self.seed, shuffle=False
        )
        for _ in range(self.micro_steps):
            tokens = next(stream)
            yield {"input_ids": tokens, "labels": tokens}

    def wants_recompute(self) -> bool:
        return self.plan.config.activation_checkpointing.value != "none"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, type=Path, help="run folder written by `plan --emit`")
    parser.add_argument("--mode", choices=MODES, default="auto")
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps")
    parser.add_argument("--tiny", action="store_true", help="shrink the model (same architecture) for smoke tests")
    parser.add_argument("--seq-len", type=int, default=None, help="default: the plan's (32 with --tiny)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", type=Path, default=None, help="default: DIR/output")
    # The DeepSpeed launcher passes --local_rank; the rank comes from the environment anyway.
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    return args


def load_run(args: argparse.Namespace) -> TrainRun:
    plan_file = args.plan / "plan.json"
    if not plan_file.is_file():
        raise UserInputError(f"{plan_file} not found; emit a run folder with `hardware-selector plan ... --emit DIR`")
    plan, target = read_plan_file(plan_file.read_text(encoding="utf-8"))
    if runs_on_cpu_instead(target.device, tiny=args.tiny):
        target = target.model_copy(update={"device": "cpu", "dist_backend": "gloo"})
    hf_config = tiny_config(target.hf_config) if args.tiny else dict(target.hf_config)
    seq_len = args.seq_len or (min(target.seq_len, TINY_SEQ_LEN) if args.tiny else target.seq_len)
    return TrainRun(
        plan=plan,
        target=target,
        run_dir=args.plan.resolve(),
        hf_config=hf_config,
        steps=args.steps,
        seq_len=seq_len,
        seed=args.seed,
        output_dir=(args.output_dir or args.plan / "output").resolve(),
    )


def report(run: TrainRun, mode: str, rank: int, **facts: Any) -> None:
    """Rank 0 prints the run's outcome as one JSON line the tests and users can read."""
    if rank != 0:
        return
    losses = facts.get("losses", [])
    if any(not math.isfinite(loss) for loss in losses):
        raise RuntimeError(f"training diverged: losses {losses}")
    result = {
        "mode": mode,
        "strategy": run.target.strategy.value,
        "steps": run.steps,
        "micro_batch": run.target.micro_batch,
        "grad_accum": run.target.grad_accum,
        "global_batch": run.target.global_batch,
        "seq_len": run.seq_len,
        **facts,
    }
    print("TRAIN_RESULT " + json.dumps(result), flush=True)


def resolve_mode(run: TrainRun, mode: str) -> str:
    if mode != "auto":
        return mode
    if any(os.environ.get(flag) for flag in _ACCELERATE_LAUNCH_FLAGS):
        return "accelerate"  # started by `accelerate launch`, whatever the plan's default launcher
    return run.target.train_mode


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if "WORLD_SIZE" not in os.environ:
            raise UserInputError(
                f"start this script through a launcher: bash {args.plan / 'launch.sh'} "
                f"(or torchrun --nproc-per-node N {Path(__file__).name} --plan {args.plan})"
            )
        run = load_run(args)
    except UserInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    mode = resolve_mode(run, args.mode)
    if mode == "engine":
        from backends import run as engine_run

        forwarded = ["--plan", str(run.run_dir), "--steps", str(run.steps)] + (["--tiny"] if args.tiny else [])
        return int(engine_run.main(forwarded) or 0)
    runner = _runner(mode)
    runner(run)
    return 0


def _runner(mode: str) -> Callable[[TrainRun], None]:
    if mode == "trainer":
        from backends.train_trainer import run_trainer

        return run_trainer
    from backends import train_loops

    return {"ddp": train_loops.run_ddp, "deepspeed": train_loops.run_deepspeed, "accelerate": train_loops.run_accelerate}[
        mode
    ]


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    exit_worker(main())
