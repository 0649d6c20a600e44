"""The HF Trainer as one more way to run a folder: `python -m backends.run --plan DIR --trainer`.

The Trainer runs its own loop, so this door is driven by the folder's own
Trainer files (training_args.json and, for DeepSpeed, ds_config_trainer.json,
exactly as a Trainer user would load them) with the run's overrides on top
(steps, learning rate, batch for this world size), on the same tokenized
blocks as the runner's loop. metrics.jsonl gets the runner's rows: the
launch row as the launch starts (after the rows past the checkpoint it
resumes from are dropped), then a callback's train and eval rows; the
Trainer's checkpoints (checkpoints-trainer/) resume a killed run, the newest
or the one --resume-from names; a fresh
start moves an earlier run's state to previous/, as the runner's loop does.
A stop signal (SIGTERM, SIGINT) saves the step the ranks agree on and exits
128 + the signal, as the runner's loop does (graceful_stop.py), and
run_status.json says so as the runner's does, naming `train --trainer` as
what resumes it. At the end the model goes to final/ with the tokenizer, as
with every strategy, and the runner's own summary (run_summary.json) and
benchmark record (runner `backends.run --trainer`) are written, so a run of
this door calibrates the planner as every run does. Anomaly rules act after
the Trainer's update: warn, or stop, which ends as the runner's loop's stop
does (no evaluation or final/, run_status "stopped", exit 3).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from planner.errors import UserInputError
from planner.rundir.hyperparameters import scheduler_block
from planner.rundir.previous_run import TRAINER_CHECKPOINTS
from planner.training_config import ActivationCheckpointing, Strategy

if TYPE_CHECKING:
    import argparse

    from planner.contract.run_config import RunConfig

RESUME_COMMAND = "hardware-selector train --trainer"  # what resumes a run of this door (run_status.json says it)
TRAINER_RUNNER = "backends.run --trainer"  # the program a benchmark record of this door names as its measurer


class _Blocks:
    """The runner's blocks as the Trainer's dataset of model inputs."""

    def __init__(self, blocks: Any, make_batch: Any):
        self.blocks, self.make_batch = blocks, make_batch

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> dict:
        batch = self.make_batch(self.blocks[index].unsqueeze(0), salt=index)
        return {key: value[0] for key, value in batch.items()}


def _metrics_callback(metrics: Any, progress: Any, guard: Any, run: Any, status: Any) -> Any:
    """The Trainer's logs as the runner's rows; it keeps what the summary needs: the step times, the eval rows,
    and the line of an anomaly rule that stopped the run."""
    from transformers import TrainerCallback

    from backends.runner.summary import StepTimes

    class RunnerMetrics(TrainerCallback):
        def __init__(self) -> None:
            self.tick = time.perf_counter()
            self.step_s = 0.0
            self.times = StepTimes()
            self.eval_rows: list[dict] = []
            self.stopped: str | None = None

        # A step's time is its optimizer step's, begin to end: the Trainer logs, evaluates and saves after
        # on_step_end, which the runner's loop does not count in its step either.
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.tick = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.step_s = time.perf_counter() - self.tick
            self.times.add(self.step_s)

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"  # the Trainer's own name for it
            status.update(step=state.global_step, checkpoint=str(folder))

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            logs = logs or {}
            if "eval_loss" in logs:
                import math

                row = {
                    "step": state.global_step,
                    "eval_loss": logs["eval_loss"],
                    "perplexity": math.exp(min(logs["eval_loss"], 700.0)),
                }
                self.eval_rows.append(row)
                metrics.write("eval", row)
                return
            if "loss" not in logs:
                return
            step_s = self.step_s
            row = {
                "step": state.global_step,
                "loss": logs["loss"],
                "lr": logs.get("learning_rate"),
                "grad_norm": logs.get("grad_norm"),
                "step_s": step_s,
                "tokens_per_s": run.global_batch * run.seq_len / step_s if step_s > 0 else 0.0,
            }
            verdict = guard.judge(float(logs["loss"]), logs.get("grad_norm"))
            if verdict.action != "ok":
                row["anomaly"] = {"action": verdict.action, "reason": verdict.reason}
                progress.say(f"warning: step {state.global_step}: {verdict.reason} ({verdict.action})")
                if verdict.action == "stop":
                    control.should_training_stop = True
                    control.should_save = True
                    # The Trainer reports the loss and norm after its update: its checkpoint holds that update.
                    folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                    self.stopped = (
                        f"training stopped at step {state.global_step}: {verdict.reason}; the state after that "
                        f"step's update is in {folder} (change the anomaly rules in plan.json to go on)"
                    )
            metrics.write("train", row)
            progress.update(state.global_step, f"loss {logs['loss']:.4f}")

    return RunnerMetrics()


def _plans_checkpointing(model: Any, mode: ActivationCheckpointing, kwargs: dict[str, Any]) -> None:
    """Selective and op-level checkpointing run through our wrapper on the model, the Trainer's own (whole blocks,
    what training_args.json asks for: the Trainer has no other) turned off, so that the door runs the plan's mode."""
    if mode not in (ActivationCheckpointing.SELECTIVE, ActivationCheckpointing.OP):
        return
    from backends.parts.activation_checkpointing import apply_activation_checkpointing

    apply_activation_checkpointing(model, mode.value)
    for name in ("gradient_checkpointing", "activation_checkpointing"):  # the name depends on transformers' version
        if name in kwargs:
            kwargs[name] = False
    if isinstance(kwargs.get("fsdp_config"), dict):
        kwargs["fsdp_config"]["activation_checkpointing"] = False


def newest_checkpoint(folder: Path) -> tuple[str | None, int]:
    """The checkpoint the Trainer resumes from (its own choice: the highest N of checkpoint-N, the step it was saved
    at) and that step; (None, 0) when there is none."""
    from transformers.trainer_utils import get_last_checkpoint

    newest = get_last_checkpoint(str(folder)) if folder.is_dir() else None
    if newest is None:
        return None, 0
    return newest, int(Path(newest).name.rsplit("-", 1)[1])


def trainer_checkpoint(value: Path, run_dir: Path) -> tuple[str, int]:
    """--resume-from under --trainer: a Trainer checkpoint-<N> folder, this run's or another run folder's (looked
    up as the runner's are: checkpoints.resume_folder), and the step it was saved at (its trainer_state.json's)."""
    from backends.runner.checkpoints import RUNNER_STATE, TRAINER_STATE, not_found_where, resume_folder

    chosen = resume_folder(value, run_dir)
    if chosen is None:
        where = not_found_where(value, run_dir)
        raise UserInputError(f"--resume-from {value}: no such folder{where}; name a checkpoints-trainer/checkpoint-<N> "
                             "folder")  # fmt: skip
    if not (chosen / TRAINER_STATE).is_file():
        runners = f"a checkpoint of the runner (its {RUNNER_STATE}): drop --trainer to resume it"
        what = (
            runners if (chosen / RUNNER_STATE).is_file() else f"not a checkpoint of the HF Trainer (no {TRAINER_STATE})"
        )
        raise UserInputError(f"--resume-from {value}: {what}; or name a checkpoints-trainer/checkpoint-<N> folder")
    try:
        step = int(json.loads((chosen / TRAINER_STATE).read_text(encoding="utf-8"))["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        raise UserInputError(f"--resume-from {value}: its {TRAINER_STATE} cannot be read (damaged?); name another "
                             "checkpoint-<N> folder") from None  # fmt: skip
    return str(chosen), step


def _fresh_start(run_dir: Path) -> Path | None:
    """As the runner's loop starts afresh: an earlier run's state (its metrics.jsonl, run_status.json, final/, the
    runner's and the Trainer's checkpoints) moved to previous/<time>/, kept and never resumed; where, or None."""
    from planner.rundir.previous_run import archive_previous_run

    return archive_previous_run(run_dir)  # checkpoints-trainer/ is run state too (previous_run.RUN_STATE)


def checkpoint_arguments(run: RunConfig) -> dict[str, Any]:
    """The run's checkpoint policy as TrainingArguments: every --save-every steps, the newest --keep-last kept
    (the run as this launch has it, `train`'s flags applied; docs/running.md, "Checkpoints")."""
    every = run.checkpoint.every
    return {
        "save_strategy": "steps" if every else "no",
        "save_steps": every or 500,  # unused under "no", which TrainingArguments still wants a number for
        "save_total_limit": run.checkpoint.keep_last,
    }


def train_with_trainer(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import Trainer, TrainingArguments

    from backends.cpu_distributed import configure_cpu_accelerate_state
    from backends.data import prepare_data
    from backends.runner.anomaly import AnomalyGuard, RunStopped, refuse_unsupported
    from backends.runner.export import _copy_tokenizer
    from backends.runner.graceful_stop import signals_at_step_boundaries, stop_on_signal_callback
    from backends.runner.metrics import MetricsLog
    from backends.runner.options import load_checked_folder
    from backends.runner.progress import Progress
    from backends.runner.run_length import total_steps
    from backends.runner.status import RunStatus
    from backends.runner.summary import finish_summary
    from backends.runner.tasks import batch_maker
    from backends.runner.world import fit_device, fit_to_world, process_counts
    from backends.weights.model_init import build_model, load_full
    from backends.weights.source import source_for

    spec = load_checked_folder(args)
    kwargs_file = spec.run_dir / "training_args.json"
    if not kwargs_file.is_file() or spec.strategy is Strategy.ENGINE:
        raise UserInputError(
            "--trainer runs DDP, FSDP and DeepSpeed plans (their training_args.json); this plan runs "
            "on our engine: drop --trainer"
        )
    refusal = refuse_unsupported(spec.run.anomaly, "the HF Trainer door", checks_norm_before_update=False)
    if refusal:  # the Trainer reports the norm after its update (docs/running.md, "Anomalies")
        raise UserInputError(refusal)
    rank, world, local_rank, local_world = process_counts()
    run = fit_device(spec.run, tiny=args.tiny)
    run, note = fit_to_world(run, world, tiny=args.tiny, local_world=local_world)
    if args.tiny:
        run = run.model_copy(update={"seq_len": min(run.seq_len, 32)})
    strategy = spec.strategy.value
    if run.device == "cpu" and strategy in ("fsdp", "deepspeed"):
        configure_cpu_accelerate_state(strategy)
    keep_vocab = not run.data.synthetic
    model = build_model(
        run.model,
        tiny=args.tiny,
        dropout=run.optim.dropout,
        seed=run.optim.seed,
        keep_vocab=keep_vocab,
        empty=run.model.init == "pretrained" and not args.tiny,
    )
    if run.model.init == "pretrained" and not args.tiny:
        load_full(model, source_for(model, run.model.path), torch.device("cpu"))
    data = prepare_data(
        run.data,
        run_dir=spec.run_dir,
        tokenizer_dir=run.model.tokenizer_dir,
        model_name=run.model.name,
        seq_len=run.seq_len,
        vocab_size=int(model.config.vocab_size),
        global_batch=run.global_batch,
        local_rank=local_rank,
        seed=run.data.seed,
        data_parallel=run.layout.data_parallel,
    )
    steps = total_steps(run, len(data.train), run.data.synthetic)
    block = scheduler_block(run.optim, steps)
    kwargs = json.loads(kwargs_file.read_text(encoding="utf-8"))
    if kwargs.get("deepspeed"):
        kwargs["deepspeed"] = str(spec.run_dir / kwargs["deepspeed"])
    kwargs.update(
        output_dir=str(spec.run_dir / TRAINER_CHECKPOINTS),
        max_steps=steps,
        logging_steps=1,
        disable_tqdm=True,
        per_device_train_batch_size=run.micro_batch,
        gradient_accumulation_steps=run.grad_accum,
        learning_rate=run.optim.learning_rate,
        warmup_steps=run.optim.warmup_for(steps),
        seed=run.optim.seed,
        data_seed=run.data.seed,
        per_device_eval_batch_size=run.micro_batch,
        **checkpoint_arguments(run),
        eval_strategy="steps" if run.data.eval_every else "no",
        eval_steps=run.data.eval_every or None,
    )
    kwargs.pop("num_train_epochs", None)
    _plans_checkpointing(model, spec.plan.config.activation_checkpointing, kwargs)
    if run.device == "cpu" and strategy in ("fsdp", "deepspeed"):
        kwargs["accelerator_config"] = {"use_configured_state": True}
    if block is None:
        kwargs["lr_scheduler_type"] = "constant_with_warmup"
    make_batch = batch_maker(
        run.model.task, vocab_size=int(model.config.vocab_size), tokenizer=None, seed=run.data.seed
    )
    checkpoints = Path(kwargs["output_dir"])
    resumed_from: str | None
    if args.resume_from is not None:  # the one named (checked before launch: hardware_selector_cli/train.py)
        resumed_from, resumed_at = trainer_checkpoint(args.resume_from, spec.run_dir)
    else:
        resumed_from, resumed_at = newest_checkpoint(checkpoints) if run.checkpoint.resume else (None, 0)
    moved = _fresh_start(spec.run_dir) if resumed_from is None and rank == 0 else None
    metrics = MetricsLog(  # the loop's rows, and its TensorBoard events where the extra is installed
        Path(args.metrics) if args.metrics else spec.run_dir / "metrics.jsonl",
        enabled=rank == 0,
        tensorboard_dir=spec.run_dir / "tensorboard",
    )
    if resumed_from is not None:
        metrics.truncate_after(resumed_at)  # each step once: a killed run's rows past its checkpoint go
    metrics.write_launch(step=resumed_at, world_size=world, resumed_from=resumed_from)
    progress = Progress(enabled=rank == 0, total=steps, start=0)
    for line in (*spec.notes, note, moved and f"starting afresh: the previous run's state is kept in {moved}"):
        if line:
            progress.say(line)
    guard = AnomalyGuard(run.anomaly)
    status = RunStatus.of_run(
        spec.run_dir, run, rank=rank, steps=steps, strategy=strategy, world=world, step=resumed_at,
        resumed_from=resumed_from, command=RESUME_COMMAND,
    )  # fmt: skip
    trainer = Trainer(
        model=model,
        args=TrainingArguments(**kwargs),
        train_dataset=_Blocks(data.train, make_batch),
        eval_dataset=_Blocks(data.eval, make_batch) if data.eval is not None else None,
        callbacks=[logged := _metrics_callback(metrics, progress, guard, run, status), stop_on_signal_callback()],
    )
    began = time.perf_counter()
    evaluation: dict[str, Any] = {}
    try:
        with signals_at_step_boundaries(defer=False):  # a stop signal saves the step the ranks agree on, then stops
            trainer.train(resume_from_checkpoint=resumed_from)
        if logged.stopped is None:  # an anomaly stop ends as the runner's loop's does: no evaluation, no final/
            evaluation = trainer.evaluate() if data.eval is not None else {}  # its eval row: the callback's
            final = spec.run_dir / "final"
            if trainer.is_fsdp_enabled:  # checkpoints stay sharded; the exported model is whole
                trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
            trainer.save_model(str(final))  # collective under ZeRO-3 and FSDP; the main process writes
            if rank == 0 and data.tokenizer_dir is not None:
                final.mkdir(parents=True, exist_ok=True)
                _copy_tokenizer(data.tokenizer_dir, final)
    except BaseException as failure:  # Interrupted (run.py exits 128 + the signal), or a failure
        status.record_end(failure, trainer.state.global_step)  # "interrupted", naming the signal's checkpoint
        raise
    finally:
        progress.close()
        metrics.close()
    stopped = logged.stopped
    status.update(state="stopped" if stopped else "finished", step=trainer.state.global_step, message=stopped or "")
    # The runner's own summary and benchmark record (every run calibrates: docs/running.md, "At the end").
    ranks = SimpleNamespace(
        device=torch.device("cuda", local_rank) if run.device == "cuda" else torch.device("cpu"),
        distributed=torch.distributed.is_initialized(),
        rank=rank,
    )
    summary = finish_summary(
        spec=spec, run=run, args=args, adapter=ranks, times=logged.times, steps=trainer.state.global_step,
        eval_rows=logged.eval_rows, resumed_from=resumed_from, wall_s=time.perf_counter() - began, stopped=stopped,
        guard=guard, say=progress.say if rank == 0 else None, runner=TRAINER_RUNNER,
    )  # fmt: skip
    if stopped is not None:
        raise RunStopped(stopped)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return {
        "summary": summary,
        "strategy": strategy,
        "adapter": "trainer",
        "steps": trainer.state.global_step,
        "losses": losses,
        "world_size": world,
        "eval": evaluation or None,
        "wall_s": time.perf_counter() - began,
        "distributed_type": trainer.accelerator.distributed_type.value,
        "wrapper": type(trainer.model_wrapped).__name__,
    }
