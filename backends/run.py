"""Run any emitted plan: `torchrun --nproc-per-node N -m backends.run --plan RUN_DIR [--tiny] [--steps N]`.

Reads RUN_DIR/plan.json and RUN_DIR/engine.json (or derives the engine config
from the plan), builds the model from the plan's HF config (random init; --tiny
shrinks it), streams synthetic tokens, and trains with the adapter the plan's
strategy names: engine (ours), ddp, fsdp (FSDP2) or deepspeed (with
RUN_DIR/ds_config.json). Metrics go to RUN_DIR/metrics.jsonl, one line per
step. Engine runs checkpoint to RUN_DIR/checkpoints every --save-every steps
and resume from there automatically, so `torchrun --max-restarts` recovers a
crashed rank. A plan for CUDA GPUs runs with --tiny on a machine without them
as CPU processes over gloo (the laptop smoke test before the cluster), and
without --tiny stops with a one-line error. Rank 0 ends with one line
`RUN_RESULT {json}`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

from planner.errors import UserInputError

STRATEGIES = ("engine", "ddp", "fsdp", "deepspeed")
TINY_SEQ_LEN = 32


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m backends.run", description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, help="run folder written by `hardware-selector plan --emit`")
    parser.add_argument("--tiny", action="store_true", help="shrink the model (same architecture) for a smoke run")
    parser.add_argument("--steps", type=int, default=10, help="train until this many optimizer steps")
    parser.add_argument("--strategy", choices=STRATEGIES, help="override the plan's strategy (same model and batch)")
    parser.add_argument("--save-every", type=int, default=0, help="engine: checkpoint every N steps (0: never)")
    parser.add_argument("--no-resume", action="store_true", help="engine: ignore existing checkpoints")
    parser.add_argument("--metrics", help="JSONL metrics path (default RUN_DIR/metrics.jsonl)")
    return parser.parse_args(argv)


def read_run(run_dir: Path) -> tuple[Any, Any]:
    from planner.emit.plan_json import read_plan_file

    plan_file = run_dir / "plan.json"
    if not plan_file.is_file():
        raise UserInputError(f"{plan_file} not found; emit a run folder with `hardware-selector plan ... --emit DIR`")
    return read_plan_file(plan_file.read_text(encoding="utf-8"))


def engine_config_for(run_dir: Path, plan: Any, target: Any, *, tiny: bool) -> Any:
    """engine.json when the folder has one, else the engine config the emitter would write for this plan."""
    from backends.config import load_engine_config
    from planner.emit.engine_json import engine_config
    from planner.training_config import Strategy

    if (run_dir / "engine.json").is_file():
        config = load_engine_config(run_dir / "engine.json")
    else:
        as_engine = plan.model_copy(update={"config": plan.config.model_copy(update={"strategy": Strategy.ENGINE})})
        config = load_engine_config(engine_config(as_engine, target))
    block = config.hardware_selector
    seq_len = min(block.seq_len, TINY_SEQ_LEN) if tiny else block.seq_len
    # The batch is fixed per rank (micro x accumulation); the world size may differ from the plan's (--nproc).
    return config.model_copy(update={"train_batch_size": None,
                                      "hardware_selector": block.model_copy(update={"seq_len": seq_len})})


def fit_to_this_machine(config: Any, *, tiny: bool) -> Any:
    """A cuda/nccl plan on a machine without CUDA: with --tiny, the same run on CPU processes with gloo."""
    from backends.cpu_distributed import runs_on_cpu_instead

    block = config.hardware_selector
    if not runs_on_cpu_instead(block.device, tiny=tiny):
        return config
    return config.model_copy(update={"hardware_selector": block.model_copy(update={"device": "cpu",
                                                                                   "dist_backend": "gloo"})})


def build_trainer(strategy: str, model: Any, config: Any, run_dir: Path, metrics: str) -> Any:
    if strategy == "engine":
        import backends

        engine, _, _, _ = backends.initialize(model=model, config=config, metrics_path=metrics)
        return engine
    if strategy == "ddp":
        from backends.ddp import DdpAdapter

        return DdpAdapter(model, config, metrics_path=metrics)
    if strategy == "fsdp":
        from backends.fsdp import FsdpAdapter

        return FsdpAdapter(model, config, metrics_path=metrics)
    from backends.deepspeed import DeepSpeedAdapter

    ds_file = run_dir / "ds_config.json"
    ds_config = json.loads(ds_file.read_text(encoding="utf-8")) if ds_file.is_file() else None
    return DeepSpeedAdapter(model, config, ds_config=ds_config, metrics_path=metrics)


def _progress(enabled: bool, total: int, start: int) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[status]}"),
                        TimeElapsedColumn(), disable=not enabled)
    task = progress.add_task("train", total=total, completed=start, status="")
    return progress, task


def train(args: argparse.Namespace) -> dict[str, Any]:
    import torch.distributed as dist

    from backends.data import SyntheticTokens, micro_batches
    from backends.model_factory import build_causal_lm, tiny_config

    run_dir = Path(args.plan)
    plan, target = read_run(run_dir)
    strategy = args.strategy or plan.config.strategy.value
    config = fit_to_this_machine(engine_config_for(run_dir, plan, target, tiny=args.tiny), tiny=args.tiny)
    if "WORLD_SIZE" in os.environ:
        from backends.distributed_init import init_distributed

        init_distributed(config.hardware_selector.dist_backend)
    rank = dist.get_rank() if dist.is_initialized() else 0
    hf_config = tiny_config(target.hf_config) if args.tiny else target.hf_config
    model = build_causal_lm(hf_config, seed=0)
    metrics = args.metrics or str(run_dir / "metrics.jsonl")
    trainer = build_trainer(strategy, model, config, run_dir, metrics)
    checkpoints = run_dir / "checkpoints"
    resumed = None
    if strategy == "engine" and not args.no_resume and checkpoints.is_dir():
        resumed, _ = trainer.load_checkpoint(checkpoints)
    comm = getattr(trainer, "comm", None)  # the engine's data-parallel group; tp/pp peers share data
    data_rank, data_world = (comm.rank, comm.world) if comm else (rank, trainer.world)
    dataset = SyntheticTokens(4096, config.hardware_selector.seq_len, hf_config["vocab_size"], seed=0)
    stream = micro_batches(dataset, micro_batch=trainer.micro_batch, rank=data_rank, world=data_world,
                           start_sample=trainer.global_samples)
    progress, task = _progress(rank == 0, args.steps, trainer.global_steps)
    losses = []
    with progress:
        while trainer.global_steps < args.steps:
            loss = trainer.train_batch([next(stream) for _ in range(trainer.grad_accum)])
            losses.append(loss)
            progress.update(task, completed=trainer.global_steps, status=f"loss {loss:.4f}")
            if strategy == "engine" and args.save_every and trainer.global_steps % args.save_every == 0:
                trainer.save_checkpoint(checkpoints)
    if strategy == "engine":
        trainer.close()  # with checkpoint.async_save in engine.json, seals the save still in flight
    history = trainer.monitor.history
    return {"strategy": strategy, "steps": trainer.global_steps, "losses": losses, "resumed_from": resumed,
            "world_size": dist.get_world_size() if dist.is_initialized() else 1, "metrics": metrics,
            "median_step_time_s": sorted(r["step_time_s"] for r in history)[len(history) // 2] if history else None}


def main(argv: Optional[list[str]] = None) -> int:
    import torch.distributed as dist

    args = parse_args(argv)
    try:
        result = train(args)
    except UserInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not dist.is_initialized() or dist.get_rank() == 0:
        print("RUN_RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    exit_worker(main())
