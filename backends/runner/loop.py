"""The one training loop: every strategy's run of a folder goes through `train(args)` (docs/running.md).

In order, on every rank: read and check the folder, start torch.distributed,
fit the run to the processes actually started, prepare the data (one rank
per node tokenizes), build the adapter (its model filled from the checkpoint
when the run is pretrained), resume from the newest checkpoint, then for
each step: the learning rate, the micro-batches, the adapter's step under
the anomaly guard, metrics, evaluation, checkpoints and exports. At the end:
a last evaluation, final/ as an HF folder, and the summary that sets the
measured step time and memory beside the plan's predictions.
"""

from __future__ import annotations

import hashlib
import math
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import UserInputError
from planner.rundir.hyperparameters import scheduler_block
from planner.rundir.run_overrides import overrides_from

from .anomaly import AnomalyGuard, refuse_unsupported
from .checkpoints import RunCheckpoints, check_resumable, model_fingerprint
from .folder import engine_settings, load_run_folder
from .metrics import MetricsLog
from .options import override_values
from .progress import Progress
from .status import RunStatus
from .summary import StepTimes, finish_summary
from .world import fit_device, fit_to_world, process_counts

if TYPE_CHECKING:
    import argparse

    from transformers import PreTrainedTokenizerBase

    from planner.contract.run_config import RunConfig

SYNTHETIC_DEFAULT_STEPS = 10
TINY_SEQ_LEN = 32


class RunStopped(Exception):
    """An anomaly rule with action `stop` ended the run; the message is the one line to print."""


def start_distributed(backend: str) -> None:
    from backends.distributed_init import init_distributed

    _, world, _, _ = process_counts()
    if world > 1 or "TORCHELASTIC_RUN_ID" in __import__("os").environ:
        init_distributed(backend)


def total_steps(run: RunConfig, train_blocks: int, synthetic: bool) -> int:
    if run.optim.max_steps:
        return run.optim.max_steps
    if synthetic:
        return SYNTHETIC_DEFAULT_STEPS
    return max(1, math.ceil(run.optim.epochs * train_blocks / run.global_batch))


def train(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from backends.adapters import AdapterSetup, build_adapter
    from backends.data import micro_batches, prepare_data

    from .model_init import build_model, hf_config
    from .tasks import batch_maker
    from .weights import tied_names

    spec = load_run_folder(args.plan, overrides_from(override_values(args)), args.strategy)
    rank, world, local_rank, local_world = process_counts()
    run = fit_device(spec.run, tiny=args.tiny)
    start_distributed(run.dist_backend)
    run, world_note = fit_to_world(run, world, tiny=args.tiny, local_world=local_world)
    if args.tiny:
        run = run.model_copy(update={"seq_len": min(run.seq_len, TINY_SEQ_LEN)})
    device = torch.device("cuda", local_rank) if run.device == "cuda" else torch.device("cpu")
    if run.device == "cuda":
        torch.cuda.set_device(device)
    progress_enabled = rank == 0
    run_dir = spec.run_dir
    keep_vocab = not run.data.synthetic  # a tiny model still reads the real tokenizer's ids
    config = hf_config(run.model, tiny=args.tiny, dropout=run.optim.dropout, keep_vocab=keep_vocab)
    vocab = int(config.vocab_size)
    notes = [world_note] if world_note else []
    pretrained = run.model.init == "pretrained" and not args.tiny
    if run.model.init == "pretrained" and args.tiny:
        notes.append("note: --tiny trains the shrunken architecture from random weights, not the checkpoint")
    data = prepare_data(
        run.data,
        run_dir=run_dir,
        tokenizer_dir=run.model.tokenizer_dir,
        model_name=run.model.name,
        seq_len=run.seq_len,
        vocab_size=vocab,
        global_batch=run.global_batch,
        local_rank=local_rank,
        seed=run.data.seed,
    )
    steps = total_steps(run, len(data.train), run.data.synthetic)
    block = scheduler_block(run.optim, steps)
    settings = engine_settings(spec, run)
    setup = AdapterSetup(
        plan=spec.plan,
        run=run,
        engine_config=settings,
        make_model=partial(
            build_model,
            run.model,
            tiny=args.tiny,
            dropout=run.optim.dropout,
            seed=run.optim.seed,
            keep_vocab=keep_vocab,
        ),
        weights_folder=run.model.path if pretrained else None,
        device=device,
        run_dir=run_dir,
        ds_config=spec.ds_config,
    )
    torch.manual_seed(run.optim.seed)
    adapter = build_adapter(spec.strategy.value, setup)
    refusal = refuse_unsupported(run.anomaly, adapter.name, adapter.supports_skip_before_update)
    if refusal:
        raise UserInputError(refusal)
    guard = AnomalyGuard(run.anomaly)
    checkpoints = RunCheckpoints(run_dir / "checkpoints", run.checkpoint.keep_last)
    newest = checkpoints.newest() if run.checkpoint.resume else None  # collective: rank 0 decides
    if newest is None and rank == 0:
        from planner.rundir.previous_run import archive_previous_run

        moved = archive_previous_run(run_dir)  # a fresh start never mixes with an earlier run's files
        if moved is not None:
            notes.append(f"starting afresh: the previous run's state is kept in {moved}")
    metrics = MetricsLog(
        Path(args.metrics) if args.metrics else run_dir / "metrics.jsonl",
        enabled=rank == 0,
        tensorboard_dir=run_dir / "tensorboard",
    )
    fingerprint = model_fingerprint(run.model.hf_config, tiny=args.tiny)
    plan_digest = hashlib.sha256((run_dir / "plan.json").read_bytes()).hexdigest()[:16]
    step, samples, resumed_from = 0, 0, None
    if newest is not None:
        from backends.checkpoint.layout import read_json

        from .checkpoints import RUNNER_STATE

        check_resumable(
            read_json(newest / RUNNER_STATE),
            folder=newest,
            model_name=run.model.name,
            fingerprint=fingerprint,
            strategy=spec.strategy.value,
        )
        state = checkpoints.load(adapter, newest)
        step, samples = int(state["step"]), int(state["samples"])
        guard.load_state_dict(state.get("anomaly", {}))
        resumed_from = str(newest)
        metrics.truncate_after(step)
        saved = state["saved_under"]
        which = "this plan.json" if saved.get("plan_digest") == plan_digest else "an earlier plan.json"
        notes.append(
            f"resuming from {newest} (step {step}; saved under {which}: {saved['model']}, {saved['strategy']}, "
            f"global batch {saved['global_batch']}, {saved['layout']})"
        )
    make_batch = batch_maker(
        run.model.task,
        vocab_size=vocab,
        tokenizer=None if data.tokenizer_dir is None else _tokenizer(data.tokenizer_dir),
        seed=run.data.seed,
    )
    stream = micro_batches(
        data.train,
        micro_batch=adapter.micro_batch,
        rank=adapter.data_rank,
        world=adapter.data_world,
        start_sample=samples,
        seed=run.data.seed,
        shuffle=not run.data.synthetic,
        global_batch=run.global_batch,
    )
    progress = Progress(enabled=progress_enabled, total=steps, start=step)
    for note in [
        f"training {run.model.name} with {spec.strategy.value} on {world} process(es), layout "
        f"{run.layout.describe()}: {data.description}; {steps} steps of {run.global_batch} x {run.seq_len} "
        "tokens",
        *notes,
    ]:
        progress.say(note)
    times = StepTimes()
    eval_rows: list[dict] = []
    status = RunStatus(
        run_dir,
        enabled=rank == 0,
        total_steps=steps,
        strategy=spec.strategy.value,
        model=run.model.name,
        world_size=world,
        global_batch=run.global_batch,
        seq_len=run.seq_len,
    )
    status.update(step=step)
    tied = tied_names(setup.make_model(empty=True)) if rank == 0 else {}

    def saved_under() -> dict[str, Any]:
        return {
            "model": run.model.name,
            "model_fingerprint": fingerprint,
            "plan_digest": plan_digest,
            "strategy": spec.strategy.value,
            "global_batch": run.global_batch,
            "layout": run.layout.describe(),
        }

    def save(at: int) -> Path:
        folder = checkpoints.save(
            adapter, at, {"step": at, "samples": samples, "anomaly": guard.state_dict(), "saved_under": saved_under()}
        )
        status.update(step=at, checkpoint=str(folder))
        return folder

    def evaluate_now(at: int) -> None:
        if data.eval is None:
            return
        from .evaluate import evaluate

        result = {"step": at, **evaluate(adapter, data.eval, make_batch)}
        eval_rows.append(result)
        metrics.write("eval", result)
        progress.say(f"eval at step {at}: loss {result['eval_loss']:.4f}, perplexity {result['perplexity']:.2f}")

    def export(at: int) -> None:
        from .export import export_hf_folder

        last_eval = eval_rows[-1] if eval_rows and eval_rows[-1]["step"] == at else None
        export_hf_folder(
            adapter,
            config,
            run_dir / "final",
            tied=tied,
            tokenizer_dir=data.tokenizer_dir,
            facts={"step": at, "strategy": spec.strategy.value, "model": run.model.name, "eval": last_eval},
        )
        progress.say(f"wrote {run_dir / 'final'} (HF folder, step {at})")

    began = time.perf_counter()
    stopped = None
    try:
        while step < steps:
            tick = time.perf_counter()
            micro = [make_batch(next(stream), salt=samples + index) for index in range(adapter.grad_accum)]
            data_s = time.perf_counter() - tick
            lr = _lr(block, run.optim.learning_rate, step + 1)
            adapter.set_lr(lr)
            outcome = adapter.train_step(micro, guard)
            step += 1
            samples += run.global_batch
            verdict = guard.after_step(outcome)
            step_s = time.perf_counter() - tick
            times.add(step_s)
            row = _train_row(step, outcome, lr, data_s, step_s, run, args.tiny, adapter, verdict)
            metrics.write("train", row)
            progress.update(step, f"loss {outcome.loss:.4f}")
            if verdict.action in ("warn", "skip-step"):
                progress.say(f"warning: step {step}: {verdict.reason} ({verdict.action})")
            if verdict.action == "stop":
                folder = save(step)
                stopped = (
                    f"training stopped at step {step}: {verdict.reason}; the state before that step's update "
                    f"is in {folder} (resume skips past its data, or change the anomaly rules in plan.json)"
                )
                break
            if run.data.eval_every and step % run.data.eval_every == 0 and step < steps:
                evaluate_now(step)
            if run.checkpoint.every and step % run.checkpoint.every == 0 and step < steps:
                save(step)
            if run.checkpoint.export_every and step % run.checkpoint.export_every == 0 and step < steps:
                export(step)
        if stopped is None:
            evaluate_now(step)
            if run.checkpoint.every:
                save(step)
            export(step)
    except BaseException as failure:
        status.update(state="failed", step=step, message=f"{type(failure).__name__}: {failure}"[:500])
        raise
    finally:
        progress.close()
        metrics.close()
    status.update(state="stopped" if stopped else "finished", step=step, message=stopped or "")
    summary = finish_summary(
        spec=spec,
        run=run,
        args=args,
        adapter=adapter,
        times=times,
        steps=step,
        eval_rows=eval_rows,
        resumed_from=resumed_from,
        wall_s=time.perf_counter() - began,
        stopped=stopped,
        guard=guard,
        say=progress.say if rank == 0 else None,
    )
    adapter.close()
    if stopped is not None:
        raise RunStopped(stopped)
    return summary


def _lr(block: Any, base: float, iteration: int) -> float:
    if block is None:
        return base
    from backends.schedulers import lr_at

    return lr_at(block, base, iteration)


def _tokenizer(folder: Path) -> PreTrainedTokenizerBase | None:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)


def _train_row(
    step: int, outcome: Any, lr: float, data_s: float, step_s: float, run: Any, tiny: bool, adapter: Any, verdict: Any
) -> dict[str, Any]:
    from .summary import peak_memory_bytes

    tokens = run.global_batch * run.seq_len
    row: dict[str, Any] = {
        "step": step,
        "loss": outcome.loss,
        "lr": lr,
        "grad_norm": outcome.grad_norm,
        "tokens_per_s": tokens / step_s if step_s > 0 else 0.0,
        "step_s": step_s,
        "data_s": data_s,
        "forward_backward_s": outcome.compute_s,
        "optimizer_s": outcome.optimizer_s,
        "peak_memory_bytes": peak_memory_bytes(adapter.device),
        "applied": outcome.applied,
    }
    predicted = run.predicted
    if run.device == "cuda" and not tiny and predicted.model_flops_per_token and predicted.peak_flops_per_device:
        row["mfu"] = (
            row["tokens_per_s"] * predicted.model_flops_per_token / (run.world_size * predicted.peak_flops_per_device)
        )
    if outcome.overflow:
        row["overflow"] = True
    if verdict.action != "ok":
        row["anomaly"] = {"action": verdict.action, "reason": verdict.reason}
    return row
