"""The one training loop: every strategy's run of a folder goes through `train(args)` (docs/running.md).

`train` runs five phases of a RunSession, in order, on every rank:

1. set up (`RunSession.set_up`): read and check the folder, start torch.distributed, fit the run to the
   processes actually started, prepare the data (one rank per node tokenizes), build the adapter (its model
   filled from the checkpoint when the run is pretrained);
2. resume (`resume`): from the newest checkpoint, or afresh with an earlier run's files moved aside;
3. step (`train_steps`): the learning rate, the micro-batches, the adapter's step under the anomaly guard,
   metrics, and every `eval_every` / `every` / `export_every` steps
4. evaluate (`evaluate`), checkpoint (`save`) and export (`export`);
5. finish (`finish`): a last evaluation, final/ as an HF folder, and the summary that sets the measured step
   time and memory beside the plan's predictions.

The order of the collective calls (adapter build, the newest-checkpoint vote, checkpoint loads and saves) is
the same on every rank. That order is why the phases stay in this one file (403 lines, three past the house's
400): split apart, a reader could no longer check in one place that every rank makes the same calls in turn.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.monitoring.peak_memory import check_memory_limit
from backends.parts.schedulers import lr_at
from backends.runner.anomaly import AnomalyGuard, RunStopped, refuse_unsupported
from backends.runner.checkpoints import RunCheckpoints, check_resumable, data_identity, model_fingerprint, saved_under
from backends.runner.elastic import announce_replan, fit_elastic, saved_layout
from backends.runner.folder import engine_settings
from backends.runner.graceful_stop import save_if_signalled, signals_at_step_boundaries
from backends.runner.metrics import MetricsLog, train_row
from backends.runner.options import load_checked_folder
from backends.runner.progress import Progress
from backends.runner.run_length import total_steps
from backends.runner.status import RunStatus
from backends.runner.summary import StepTimes, finish_summary
from backends.runner.world import fit_device, fit_tiny, fit_to_world, process_counts, rank_device, start_distributed
from planner.errors import UserInputError
from planner.rundir.hyperparameters import scheduler_block
from planner.rundir.replan import plan_digest

if TYPE_CHECKING:
    import argparse

    from transformers import PreTrainedTokenizerBase

    from backends.adapters.base import Adapter
    from backends.runner.folder import RunSpec
    from planner.contract.run_config import RunConfig


def train(args: argparse.Namespace) -> dict[str, Any]:
    """Train the run folder `args.plan` names; the summary of the run (docs/running.md)."""
    session = RunSession.set_up(args)
    session.resume()
    session.metrics.write_launch(step=session.step, world_size=session.world, resumed_from=session.resumed_from)
    session.open_stream()
    began = time.perf_counter()
    try:
        with signals_at_step_boundaries():  # a stop signal checkpoints at the next step boundary
            stopped = session.train_steps()
        if stopped is None and not session.args.steps_only:  # a tune's trial only times the steps
            session.evaluate(session.step)
            if session.run.checkpoint.every:
                session.save(session.step)
            session.export(session.step)
    except BaseException as failure:
        session.status.record_end(failure, session.step)
        raise
    finally:
        session.progress.close()
        session.metrics.close()
    return session.finish(stopped, wall_s=time.perf_counter() - began)


@dataclass
class RunSession:
    """One rank's run of a folder: what set-up built, and where the run stands (step, samples seen)."""

    args: argparse.Namespace
    spec: RunSpec
    run: RunConfig
    rank: int
    world: int
    config: Any  # the model's transformers config
    data: Any  # backends.data.PreparedData
    steps: int
    schedule: Any  # the scheduler block, None for a constant learning rate
    setup: Any  # backends.adapters.AdapterSetup
    adapter: Adapter
    guard: AnomalyGuard
    checkpoints: RunCheckpoints
    notes: list[str]
    step: int = 0
    samples: int = 0
    resumed_from: str | None = None
    eval_rows: list[dict] = field(default_factory=list)
    times: StepTimes = field(default_factory=StepTimes)
    fingerprint: str = ""
    plan_digest: str = ""
    data_identity: dict = field(default_factory=dict)  # checkpoints.data_identity, read at resume
    metrics: MetricsLog = field(init=False)
    progress: Progress = field(init=False)
    status: RunStatus = field(init=False)
    make_batch: Any = field(init=False)
    stream: Any = field(init=False)
    tied: dict = field(init=False)
    elastic: Any = None  # backends.runner.elastic.ElasticStart of an elastic folder

    @classmethod
    def set_up(cls, args: argparse.Namespace) -> RunSession:
        """Phase 1: the folder read, torch.distributed started, the data prepared and the adapter built."""
        import torch

        from backends.adapters import AdapterSetup, build_adapter
        from backends.data import prepare_data
        from backends.parts.attention_backend import sdpa_notes
        from backends.weights.model_init import build_model, hf_config

        spec = load_checked_folder(args)
        rank, world, local_rank, local_world = process_counts()
        run = fit_device(spec.run, tiny=args.tiny)
        start_distributed(run.dist_backend)
        spec, run, elastic = fit_elastic(spec, run, world, local_world)  # an elastic folder's plan for this world
        run, world_note = fit_to_world(run, world, tiny=args.tiny, local_world=local_world)
        if args.tiny:
            run = fit_tiny(run)
        device = rank_device(run.device, local_rank)
        keep_vocab = not run.data.synthetic  # a tiny model still reads the real tokenizer's ids
        config = hf_config(run.model, tiny=args.tiny, dropout=run.optim.dropout, keep_vocab=keep_vocab)
        notes = [*spec.notes, *([world_note] if world_note else []), *sdpa_notes(device, run.layout.cp)]
        pretrained = run.model.init == "pretrained" and not args.tiny
        if run.model.init == "pretrained" and args.tiny:
            notes.append("note: --tiny trains the shrunken architecture from random weights, not the checkpoint")
        data = prepare_data(
            run.data,
            run_dir=spec.run_dir,
            tokenizer_dir=run.model.tokenizer_dir,
            model_name=run.model.name,
            seq_len=run.seq_len,
            vocab_size=int(config.vocab_size),
            global_batch=run.global_batch,
            local_rank=local_rank,
            seed=run.data.seed,
            data_parallel=run.layout.data_parallel,
        )
        steps = total_steps(run, len(data.train), run.data.synthetic)
        make_model = partial(
            build_model,
            run.model,
            tiny=args.tiny,
            dropout=run.optim.dropout,
            seed=run.optim.seed,
            keep_vocab=keep_vocab,
        )
        setup = AdapterSetup(
            plan=spec.plan,
            run=run,
            engine_config=engine_settings(spec, run),
            make_model=make_model,
            weights_folder=run.model.path if pretrained else None,
            device=device,
            run_dir=spec.run_dir,
            ds_config=spec.ds_config,
        )
        torch.manual_seed(run.optim.seed)
        adapter = build_adapter(spec.strategy.value, setup)
        refusal = refuse_unsupported(run.anomaly, adapter.name, adapter.supports_skip_before_update)
        if refusal:
            raise UserInputError(refusal)
        return cls(
            args=args,
            spec=spec,
            run=run,
            rank=rank,
            world=world,
            config=config,
            data=data,
            steps=steps,
            schedule=scheduler_block(run.optim, steps),
            setup=setup,
            adapter=adapter,
            guard=AnomalyGuard(run.anomaly),
            checkpoints=RunCheckpoints(spec.run_dir / "checkpoints", run.checkpoint.keep_last),
            notes=notes,
            elastic=elastic,
        )

    def resume(self) -> None:
        """Phase 2: from the newest checkpoint (every rank agrees on it), or afresh with an earlier run moved aside."""
        run, run_dir = self.run, self.spec.run_dir
        newest = (  # rank 0 decides
            self.checkpoints.newest(self.args.resume_from, tiny=self.args.tiny) if run.checkpoint.resume else None
        )
        if newest is None and self.rank == 0:
            from planner.rundir.previous_run import archive_previous_run

            moved = archive_previous_run(run_dir)  # a fresh start never mixes with an earlier run's files
            if moved is not None:
                what = "the --tiny smoke test's" if self.checkpoints.passed_over_smoke_test else "the previous run's"
                self.notes.append(f"starting afresh: {what} state is kept in {moved}")
        self.metrics = MetricsLog(
            Path(self.args.metrics) if self.args.metrics else run_dir / "metrics.jsonl",
            enabled=self.rank == 0,
            tensorboard_dir=run_dir / "tensorboard",
        )
        self.fingerprint = model_fingerprint(run.model.hf_config, tiny=self.args.tiny)
        # What the data position counts in, read once: the ranks train from the token cache, so a data file moved or
        # grown mid-run must neither fail a later save nor be recorded as what this run read.
        self.data_identity = data_identity(run.data, run.seq_len)
        self.plan_digest = plan_digest(run_dir)
        if newest is None:
            announce_replan(self, None)  # an elastic run started afresh on another world size
            return
        reset_note = check_resumable(
            self.checkpoints.runner_state(newest),
            folder=newest,
            model_name=run.model.name,
            fingerprint=self.fingerprint,
            strategy=self.spec.strategy.value,
            here=run_dir,
            digest=self.plan_digest,
            explicit=self.args.resume_from is not None,
            data=self.data_identity,
            reset_data=self.args.reset_data_position,
            steps=self.steps,
        )
        state = self.checkpoints.load(self.adapter, newest)
        self.step, self.samples = int(state["step"]), 0 if reset_note else int(state["samples"])
        self.notes += [reset_note] if reset_note else []  # the checkpoint's data position was of other data
        self.guard.load_state_dict(state.get("anomaly", {}))
        self.resumed_from = str(newest)
        self.metrics.truncate_after(self.step)
        saved = state["saved_under"]
        which = saved_under(saved, self.plan_digest, self.spec.run_dir)
        self.notes.append(
            f"resuming from {newest} (step {self.step}; saved under {which}: {saved['model']}, {saved['strategy']}, "
            f"global batch {saved['global_batch']}, {saved['layout']})"
            + (f"; the run is complete at {self.steps} steps: nothing to train (--steps above it trains on)"
               if self.step >= self.steps else "")
        )  # fmt: skip
        announce_replan(self, saved)

    def open_stream(self) -> None:
        """The micro-batch stream from the sample the run stands at, the progress line and the status file."""
        from backends.data import micro_batches
        from backends.runner.tasks import batch_maker
        from backends.weights.source import tied_names

        run, data, adapter = self.run, self.data, self.adapter
        self.make_batch = batch_maker(
            run.model.task,
            vocab_size=int(self.config.vocab_size),
            tokenizer=None if data.tokenizer_dir is None else _tokenizer(data.tokenizer_dir),
            seed=run.data.seed,
        )
        self.stream = micro_batches(
            data.train,
            micro_batch=adapter.micro_batch,
            rank=adapter.data_rank,
            world=adapter.data_world,
            start_sample=self.samples,
            seed=run.data.seed,
            shuffle=not run.data.synthetic,
            global_batch=run.global_batch,
        )
        strategy = self.spec.strategy.value
        self.progress = Progress(enabled=self.rank == 0, total=self.steps, start=self.step)
        self.progress.say(
            f"training {run.model.name} with {strategy} on {self.world} process{'es' * (self.world != 1)}, layout "
            f"{run.layout.describe()}: {data.description}; {self.steps} steps of {run.global_batch} x {run.seq_len} "
            "tokens"
        )
        for note in self.notes:
            self.progress.say(note)
        self.status = RunStatus.of_run(
            self.spec.run_dir, run, rank=self.rank, steps=self.steps, strategy=strategy, world=self.world,
            step=self.step, resumed_from=self.resumed_from,
        )  # fmt: skip
        self.tied = tied_names(self.setup.make_model(empty=True)) if self.rank == 0 else {}

    def train_steps(self) -> str | None:
        """Phase 3: steps until the last one; the one line of an anomaly rule that stopped the run, else None."""
        run, adapter = self.run, self.adapter
        while self.step < self.steps:
            tick = time.perf_counter()
            micro = [
                self.make_batch(next(self.stream), salt=self.samples + index) for index in range(adapter.grad_accum)
            ]
            data_s = time.perf_counter() - tick
            lr = lr_at(self.schedule, run.optim.learning_rate, self.step + 1)
            adapter.set_lr(lr)
            outcome = adapter.train_step(micro, self.guard)
            self.step += 1
            self.samples += run.global_batch
            verdict = self.guard.after_step(outcome)
            step_s = time.perf_counter() - tick
            self.times.add(step_s)
            check_memory_limit(self.args.memory_limit_gb, adapter.device, self.rank)
            self.metrics.write(
                "train", train_row(self.step, outcome, lr, data_s, step_s, run, self.args.tiny, adapter, verdict)
            )
            self.progress.update(self.step, f"loss {outcome.loss:.4f}")
            if verdict.action in ("warn", "skip-step"):
                self.progress.say(f"warning: step {self.step}: {verdict.reason} ({verdict.action})")
            if verdict.action == "stop":
                folder = self.save(self.step)
                return (
                    f"training stopped at step {self.step}: {verdict.reason}; the state before that step's update "
                    f"is in {folder} (resume skips past its data, or change the anomaly rules in plan.json)"
                )
            self._every_few_steps()
        return None

    def _every_few_steps(self) -> None:
        run, step = self.run, self.step
        save_if_signalled(self)  # before the step's own evaluation or save: the ranks agree, save, stop
        if step >= self.steps or self.args.steps_only:
            return  # the last step's evaluation, checkpoint and export are the finish's
        if run.data.eval_every and step % run.data.eval_every == 0:
            self.evaluate(step)
        if run.checkpoint.every and step % run.checkpoint.every == 0:
            self.save(step)
        if run.checkpoint.export_every and step % run.checkpoint.export_every == 0:
            self.export(step)

    def evaluate(self, at: int) -> None:
        """Phase 4a: the held-out loss and perplexity, when the run has an evaluation set."""
        if self.data.eval is None:
            return
        from backends.runner.evaluate import evaluate

        result = {"step": at, **evaluate(self.adapter, self.data.eval, self.make_batch)}
        self.eval_rows.append(result)
        self.metrics.write("eval", result)
        self.progress.say(f"eval at step {at}: loss {result['eval_loss']:.4f}, perplexity {result['perplexity']:.2f}")

    def save(self, at: int) -> Path:
        """Phase 4b: a checkpoint, with what the run was saved under (resume checks it)."""
        run = self.run
        saved_under = {
            "model": run.model.name,
            "model_fingerprint": self.fingerprint,
            "plan_digest": self.plan_digest,
            "strategy": self.spec.strategy.value,
            "global_batch": run.global_batch,
            "layout": run.layout.describe(),
            "run_dir": str(self.spec.run_dir),
            "data": self.data_identity,
            **saved_layout(self.spec, run),
        }
        state = {"step": at, "samples": self.samples, "anomaly": self.guard.state_dict(), "saved_under": saved_under}
        folder = self.checkpoints.save(self.adapter, at, state)
        self.status.update(step=at, checkpoint=str(folder))
        return folder

    def export(self, at: int) -> None:
        """Phase 4c: final/ as an HF folder."""
        from backends.runner.export import export_hf_folder

        run_dir = self.spec.run_dir
        last_eval = self.eval_rows[-1] if self.eval_rows and self.eval_rows[-1]["step"] == at else None
        export_hf_folder(
            self.adapter,
            self.config,
            run_dir / "final",
            tied=self.tied,
            tokenizer_dir=self.data.tokenizer_dir,
            facts={"step": at, "strategy": self.spec.strategy.value, "model": self.run.model.name, "eval": last_eval},
            model_dir=Path(self.run.model.path) if self.run.model.path else None,
        )
        self.progress.say(f"wrote {run_dir / 'final'} (HF folder, step {at})")

    def finish(self, stopped: str | None, *, wall_s: float) -> dict[str, Any]:
        """Phase 5: the status and the summary (measured beside predicted); RunStopped if a rule stopped the run."""
        self.status.update(state="stopped" if stopped else "finished", step=self.step, message=stopped or "")
        summary = finish_summary(
            spec=self.spec,
            run=self.run,
            args=self.args,
            adapter=self.adapter,
            times=self.times,
            steps=self.step,
            eval_rows=self.eval_rows,
            resumed_from=self.resumed_from,
            wall_s=wall_s,
            stopped=stopped,
            guard=self.guard,
            say=self.progress.say if self.rank == 0 else None,
        )
        self.adapter.close()
        if stopped is not None:
            raise RunStopped(stopped)
        return summary


def _tokenizer(folder: Path) -> PreTrainedTokenizerBase | None:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
