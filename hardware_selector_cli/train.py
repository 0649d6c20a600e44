"""`train RUN_DIR`: run an emitted plan under torchrun with the engine its strategy names (backends.run).

Nothing heavy is imported here: the command checks the folder, builds the
torchrun command line and hands over; the training processes import torch.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from planner.errors import UserInputError


def _planned_target(run_dir: Path) -> Any:
    """plan.json's run block (a RunTarget: processes, layout, device)."""
    from planner.emit.plan_json import read_plan_file

    plan_file = run_dir / "plan.json"
    if not plan_file.is_file():
        raise UserInputError(f"{run_dir} has no plan.json; emit one with `hardware-selector plan ... --emit {run_dir}`")
    try:
        return read_plan_file(plan_file.read_text(encoding="utf-8"))[1]
    except (ValueError, KeyError, TypeError):
        raise UserInputError(f"{plan_file} is not a plan.json written by `hardware-selector plan --emit`") from None


def _planned_device(run_dir: Path, target: Any) -> str:
    """engine.json's device when the folder has one (backends.run uses it), else the plan's."""
    engine_file = run_dir / "engine.json"
    try:
        if engine_file.is_file():
            return str(json.loads(engine_file.read_text(encoding="utf-8"))["hardware_selector"]["device"])
    except (ValueError, KeyError, TypeError):
        pass  # backends.run reports a malformed engine.json with the exact reason
    return target.device


def _check_gpus(device: str, tiny: bool) -> None:
    if tiny or device != "cuda":
        return  # with --tiny, backends.run falls back to CPU processes and says so
    from backends.cpu_distributed import runs_on_cpu_instead  # imports torch: only here, other commands stay fast

    runs_on_cpu_instead("cuda", tiny=False)  # raises the one-line error on a machine without CUDA


def torchrun_command(run_dir: Path, *, nproc: int, steps: int, tiny: bool, max_restarts: int, save_every: int,
                     strategy: Optional[str]) -> list[str]:
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
               f"--max-restarts={max_restarts}", "--standalone", "-m", "backends.run", "--plan", str(run_dir),
               "--steps", str(steps)]
    if tiny:
        command.append("--tiny")
    if save_every:
        command += ["--save-every", str(save_every)]
    if strategy:
        command += ["--strategy", strategy]
    return command


def register(app: typer.Typer) -> None:
    @app.command("train")
    def train_command(
        run_dir: Path = typer.Argument(..., help="Run folder written by `hardware-selector plan --emit DIR`."),
        nproc: Optional[int] = typer.Option(None, "--nproc", min=1, help="Processes on this node (default: the plan's)."),
        steps: int = typer.Option(10, "--steps", min=1, help="Train until this many optimizer steps."),
        tiny: bool = typer.Option(False, "--tiny", help="Shrink the model (same architecture) for a smoke run."),
        max_restarts: int = typer.Option(0, "--max-restarts", min=0,
                                         help="Restart crashed ranks this often (engine runs resume from checkpoints)."),
        save_every: int = typer.Option(0, "--save-every", min=0, help="Engine: checkpoint every N steps."),
        strategy: Optional[str] = typer.Option(None, "--strategy", help="Override: engine, ddp, fsdp or deepspeed."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the torchrun command instead of running it."),
    ) -> None:
        """Train a planned run folder on this machine (torchrun + backends.run)."""
        if not run_dir.is_dir():
            raise UserInputError(f"{run_dir} is not a directory; pass the folder `hardware-selector plan --emit` wrote")
        if strategy not in (None, "engine", "ddp", "fsdp", "deepspeed"):
            raise UserInputError(f"--strategy {strategy!r} is not one of engine, ddp, fsdp, deepspeed")
        target = _planned_target(run_dir)
        model_parallel = target.tensor_parallel * target.pipeline_parallel
        if nproc and nproc % model_parallel:
            raise UserInputError(f"--nproc {nproc} cannot hold this plan's tensor x pipeline parallel layout of "
                                 f"{model_parallel} ranks; pass a multiple of {model_parallel}")
        command = torchrun_command(run_dir.resolve(), nproc=nproc or target.nproc_per_node, steps=steps, tiny=tiny,
                                   max_restarts=max_restarts, save_every=save_every, strategy=strategy)
        if dry_run:
            print(shlex.join(command))
            return
        _check_gpus(_planned_device(run_dir, target), tiny)
        completed = subprocess.run(command, cwd=Path(__file__).resolve().parent.parent)
        if completed.returncode:
            raise typer.Exit(completed.returncode)
