"""The engine: DeepSpeed-shaped forward / backward / step / train_batch over our ZeRO.

engine(batch) runs forward and returns the model's own output (batch: a tensor,
a tuple, a list or a dict; backends/engine/inputs.py), engine.backward(loss)
scales the loss (or the output's loss) by the fp16 loss scale and 1/grad_accum
and runs backward, engine.step() applies the optimizer at
gradient-accumulation boundaries only. Micro-steps between boundaries
communicate nothing: gradients accumulate locally.
With tensor or pipeline parallelism the model is a backends.parallelize
ParallelModel, ZeRO runs on its data-parallel group, and train_batch hands the
micro-batches to it (its pipeline schedule does forward and backward).
"""

from __future__ import annotations

import time
from typing import Any

from backends.engine.inputs import count_tokens, module_call, moved
from backends.monitoring.profiling import StepTrace
from backends.monitoring.profiling import register as register_profiled
from backends.monitoring.step_monitor import StepMonitor
from backends.monitoring.training_monitor import Decision, TrainingMonitor
from backends.parts.loss import loss_of
from backends.parts.mixed_precision import LossScaler, compute_dtype
from backends.parts.schedulers import WarmupSchedule
from backends.zero import zero_optimizer_class
from backends.zero.comm import DataParallelComm
from planner.contract.engine_config import EngineConfig
from planner.errors import UserInputError


class Engine:
    def __init__(
        self,
        model: Any,
        config: EngineConfig,
        *,
        dp_group: Any | None = None,
        parallel_model: Any | None = None,
        metrics_path: str | None = None,
        weights: Any | None = None,
        device: Any | None = None,
        expert_parallel: Any | None = None,
        context_parallel: Any | None = None,
    ):
        """expert_parallel: a backends.expert_parallel ExpertParallel; dp_group is then its expert-data-parallel
        group, and the data-parallel world (batch sizes, samples, the mean loss) is that group times ep.
        context_parallel: a backends.context_parallel ContextParallel; dp_group then spans the cp ranks too
        (they share each micro-batch), so the data-parallel world is that group over cp."""
        self.config = config
        self.module = model
        self.parallel_model = parallel_model
        self.expert_parallel = expert_parallel
        self.context_parallel = context_parallel
        self.comm = DataParallelComm(dp_group)
        self.ep = expert_parallel.ep if expert_parallel is not None else 1
        self.cp = context_parallel.cp if context_parallel is not None else 1
        self.data_parallel_world = self.comm.world * self.ep // self.cp
        self.data_parallel_rank = self.comm.rank * self.ep // self.cp + (
            expert_parallel.ep_rank if expert_parallel else 0
        )
        self.dtype = compute_dtype(config)
        self.scaler = LossScaler(config)
        self.train_batch_size, self.micro_batch, self.grad_accum = config.batch_sizes(self.data_parallel_world)
        stage = config.zero_optimization.stage
        self.optimizer = zero_optimizer_class(stage)(
            model,
            config,
            self.comm,
            self.dtype,
            self.scaler,
            model_parallel=parallel_model if parallel_model is not None else expert_parallel,
            device=device,
            weights=weights,
        )
        if expert_parallel is not None:
            self.optimizer.before_reduce = expert_parallel.reduce_unit_gradient
        self.lr_scheduler = WarmupSchedule(self.optimizer.optimizer, config.scheduler) if config.scheduler else None
        self.device = self.optimizer.device
        self.micro_steps = 0
        self.global_steps = 0
        self.global_samples = 0  # samples consumed by all data-parallel ranks: the data position
        self.monitor = StepMonitor(self._global_rank(), metrics_path, self.device.type)
        # Metrics, callbacks that decide on each update, per-phase memory (backends/monitoring/training_monitor.py).
        self.training_monitor = TrainingMonitor(rank=self._global_rank(), device_type=self.device.type)
        self.last_decision = Decision()
        self.announce_decisions = True  # rank 0 logs warn/stop reasons (the runner reports its own)
        profiling = config.hardware_selector.profiling
        self._trace = StepTrace(profiling.step, profiling.output, self._global_rank()) if profiling else None
        register_profiled(self.monitor)
        self._tokens = 0
        self._losses: list[float] = []
        self._checkpointer: Any | None = None  # checkpoint.async_save: the save in flight
        # guard(loss, grad_norm) -> apply the step? Set by the runner's anomaly rules; checked before any update.
        self.step_guard: Any | None = None
        self.last_step_applied = True
        self.last_loss = float("nan")

    @staticmethod
    def _global_rank() -> int:
        from backends.ranks import rank

        return rank()

    @property
    def pipelined(self) -> bool:
        return self.parallel_model is not None and self.parallel_model.dims.pp > 1

    @property
    def loss_scale(self) -> float:
        return self.scaler.scale

    # DeepSpeed's accessors, for scripts written against its engine.
    def gradient_accumulation_steps(self) -> int:
        return self.grad_accum

    def train_micro_batch_size_per_gpu(self) -> int:
        return self.micro_batch

    def get_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def is_gradient_accumulation_boundary(self) -> bool:
        return (self.micro_steps + 1) % self.grad_accum == 0

    # --- one micro-step ---------------------------------------------------------------------
    def _inputs(self, batch: Any) -> tuple[Any, Any]:
        if isinstance(batch, dict):
            ids = batch["input_ids"]
            labels = batch.get("labels", ids)
        elif isinstance(batch, (tuple, list)):
            ids, labels = batch
        else:
            ids = labels = batch
        return ids.to(self.device), labels.to(self.device)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The model's own output for this micro-batch (backends/engine/inputs.py says how it is called)."""
        if self.pipelined:
            raise UserInputError("with pipeline parallelism call engine.train_batch(...); forward is per stage")
        if self._trace is not None:
            self._trace.maybe_start(self.global_steps + 1)
        with self.monitor.phase("forward"), self.training_monitor.memory.phase("forward"):
            self.optimizer.begin_forward()
            if self.parallel_model is not None or self.context_parallel is not None:
                ids, labels = self._inputs(args[0] if args else kwargs)
                self._tokens += ids.numel()  # the replica's tokens (cp ranks share them)
                if self.parallel_model is not None:  # tp (and cp, which it then splits) or pp
                    return self.parallel_model(ids, labels)
                return self.context_parallel.forward(self.module, ids, labels)  # this rank's chunks
            call_args, call_kwargs = module_call(self.module, args, kwargs)
            call_args, call_kwargs = moved(call_args, self.device), moved(call_kwargs, self.device)
            self._tokens += count_tokens(call_args, call_kwargs)
            return self.module(*call_args, **call_kwargs)

    __call__ = forward

    def backward(self, loss: Any) -> Any:
        """Backward of the loss (a scalar tensor, or the model's output holding it), scaled for fp16 and
        accumulation."""
        loss = loss_of(loss)
        boundary = self.is_gradient_accumulation_boundary()
        comm_before = self.optimizer.comm_seconds
        began = time.perf_counter()
        with self.training_monitor.memory.phase("backward"):
            self.optimizer.begin_backward(boundary)
            (loss * (self.scaler.scale / self.grad_accum)).backward()
            self.optimizer.end_backward(boundary)
        comm = self.optimizer.comm_seconds - comm_before
        self.monitor.add("comm", comm)
        self.monitor.add("backward", time.perf_counter() - began - comm)
        self._losses.append(float(loss.detach()))
        return loss

    def step(self) -> None:
        """The optimizer step, at accumulation boundaries only (elsewhere it just counts the micro-step)."""
        boundary = self.is_gradient_accumulation_boundary()
        self.micro_steps += 1
        self.global_samples += self.micro_batch * self.data_parallel_world
        if not boundary:
            return
        comm_before = self.optimizer.comm_seconds
        began = time.perf_counter()
        self.last_loss = self._mean_loss()
        self.last_decision = Decision()
        checks = self.step_guard is not None or bool(self.training_monitor.callbacks)
        with self.training_monitor.memory.phase("optimizer"):
            self.last_step_applied = self.optimizer.step(guard=self._allows_update if checks else None)
        self._announce(self.last_decision)
        self.optimizer.zero_grad()
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()  # DeepSpeed steps it on skipped steps too
        self.global_steps += 1
        comm = self.optimizer.comm_seconds - comm_before
        self.monitor.add("comm", comm)
        self.monitor.add("optimizer", time.perf_counter() - began - comm)
        self._end_step()

    def _allows_update(self, grad_norm: Any) -> bool:
        """Before the update: the monitor's callbacks (and the runner's guard) decide whether it is applied."""
        metrics = {"loss": self.last_loss}
        if grad_norm is not None:
            metrics["grad_norm"] = float(grad_norm)
        self.last_decision = self.training_monitor.decide(metrics, self.global_steps + 1)
        allowed = self.last_decision.applies_update
        if self.step_guard is not None:
            allowed = self.step_guard(self.last_loss, grad_norm) and allowed
        return allowed

    @property
    def should_stop(self) -> bool:
        """A callback answered "stop" at the last step (the update was not applied): end the loop."""
        return self.last_decision.action == "stop"

    def _announce(self, decision: Decision) -> None:
        if decision.action != "ok" and self.announce_decisions and self._global_rank() == 0:
            import logging

            verb = {"warn": "warning", "skip-step": "skipped the update", "stop": "stopping"}[decision.action]
            logging.getLogger("hardware_selector.engine").warning(
                "step %d: %s: %s", self.global_steps + 1, verb, "; ".join(decision.reasons)
            )

    def set_tensorboard_writer(self, writer: Any) -> None:
        """Every step's metrics (loss, step time, tokens/s, lr, gradient norm, phases) to this SummaryWriter."""
        self.training_monitor.set_tensorboard_writer(writer)

    def memory_profile(self) -> dict[str, Any]:
        """The peak memory of each phase so far ({"kind": ..., "peak_bytes": {"forward": ..., ...}})."""
        return self.training_monitor.memory.report()

    def _mean_loss(self) -> float:
        """This step's loss: the mean over its micro-batches and the data-parallel ranks (collective)."""
        import torch

        local = torch.tensor([sum(self._losses) / max(1, len(self._losses))], dtype=torch.float64)
        self.optimizer._wait([self.comm.all_reduce(local)])
        if self.expert_parallel is not None:
            self.expert_parallel.model_parallel_sum(local, torch.distributed.ReduceOp.SUM)
        # Under cp each rank's loss is cp x its share of its replica's: the sum over all ranks is cp x the replicas'.
        return float(local.item()) / (self.data_parallel_world * self.cp)

    def _end_step(self) -> None:
        record = self.monitor.end_step(
            self.global_steps,
            loss=self.last_loss,
            tokens=self._tokens * self.data_parallel_world,
            tracked_bytes=self.optimizer.tracked_bytes(),
            lr=self.optimizer.param_groups[0]["lr"],
            loss_scale=self.scaler.scale,
            grad_norm=self.optimizer.last_grad_norm,
            skipped_steps=self.optimizer.skipped_steps,
        )
        for name, value in record.items():
            if (
                name not in ("step", "tokens", "skipped_steps")
                and isinstance(value, (int, float))
                and value is not None
            ):
                self.training_monitor.track_metric(name, value, self.global_steps)
        if self._trace is not None:  # the trace covers the whole step: from the end of the one before
            self._trace.maybe_stop(self.global_steps)
            self._trace.maybe_start(self.global_steps + 1)
        self._losses.clear()
        self._tokens = 0

    def eval_loss(self, batch: Any) -> float:
        """The mean token loss of one batch (ids, an (ids, labels) pair or a dict), without gradients.

        Collective under ZeRO-3, tp and pp: every rank of the layout calls it with its batch."""
        import torch

        was_training = self.module.training
        self.module.eval()
        try:
            with torch.no_grad():
                self.optimizer.begin_forward()  # ZeRO-3 gathers what it released (tp too)
                if self.parallel_model is not None:
                    return float(self.parallel_model.eval_loss(*self._inputs(batch)))
                if self.context_parallel is not None:
                    return self.context_parallel.eval_loss(self.module, *self._inputs(batch))
                call_args, call_kwargs = module_call(self.module, (batch,), {})
                output = self.module(*moved(call_args, self.device), **moved(call_kwargs, self.device))
                return float(loss_of(output))
        finally:
            self.module.train(was_training)
            release = getattr(self.optimizer, "release_parameters", None)
            if release is not None:
                release()  # ZeRO-3: free what evaluation gathered

    # --- a whole step -----------------------------------------------------------------------
    def _micro_batches(self, data: Any) -> list[Any]:
        if hasattr(data, "__next__"):
            return [next(data) for _ in range(self.grad_accum)]
        if isinstance(data, list):
            if len(data) != self.grad_accum:
                raise ValueError(
                    f"train_batch got {len(data)} micro-batches; gradient_accumulation_steps is {self.grad_accum}"
                )
            return data
        if isinstance(data, tuple):  # (ids, labels) or (x, y, ...): each split along the batch
            return list(zip(*(part.chunk(self.grad_accum) for part in data)))
        if isinstance(data, dict):
            chunks = {key: value.chunk(self.grad_accum) for key, value in data.items()}
            return [{key: parts[index] for key, parts in chunks.items()} for index in range(self.grad_accum)]
        return list(data.chunk(self.grad_accum))

    def train_batch(self, data: Any) -> float:
        """All grad_accum micro-batches and the step; returns the loss averaged over them and the ranks.

        data: an iterator of micro-batches, a list of grad_accum micro-batches, or one batch (ids,
        an (ids, labels) tuple or a dict) whose first dimension is micro_batch x grad_accum.
        """
        micro_batches = self._micro_batches(data)
        if self.pipelined:
            return self._train_pipelined(micro_batches)
        for micro in micro_batches:
            self.backward(loss_of(self.forward(micro)))  # the loss alone: the output (logits) is freed now
            self.step()
        return self.last_loss

    def _train_pipelined(self, micro_batches: list[Any]) -> float:
        pairs = [self._inputs(micro) for micro in micro_batches]
        self._tokens += sum(ids.numel() for ids, _ in pairs)
        began = time.perf_counter()
        self.optimizer.begin_backward(False)  # the schedule interleaves micro-batches: reduce after all of them
        loss = self.parallel_model.train_batch(pairs, loss_multiplier=self.scaler.scale)
        self.optimizer.end_backward(True)
        self.monitor.add("backward", time.perf_counter() - began)
        self._losses.append(float(loss))
        self.micro_steps += self.grad_accum - 1
        self.step()
        return self.last_loss

    # --- checkpoints ------------------------------------------------------------------------
    def save_checkpoint(self, save_dir: str | None = None, tag: str | None = None, client_state: Any = None) -> str:
        """Collective; save_dir None: checkpoint.save_dir. With checkpoint.async_save it returns once the state is
        copied (sealed at the next wait)."""
        from backends.checkpoint.layout import checkpoint_folder
        from backends.checkpoint.save import save_checkpoint

        save_dir = checkpoint_folder(save_dir, self.config, "save_checkpoint")
        if self.config.hardware_selector.checkpoint.async_save:
            return self._async_checkpointer().save(self, save_dir, tag=tag, client_state=client_state or {})
        self.wait_for_checkpoint()
        return save_checkpoint(self, save_dir, tag=tag, client_state=client_state or {})

    def _async_checkpointer(self) -> Any:
        if self._checkpointer is None:
            from backends.checkpoint.async_save import AsyncCheckpointer

            self._checkpointer = AsyncCheckpointer()
        return self._checkpointer

    def wait_for_checkpoint(self) -> str | None:
        """Collective: seal the async save in flight (its folder), None if none; raises if its write failed."""
        return self._checkpointer.wait() if self._checkpointer is not None else None

    def close(self) -> None:
        """Before the process group ends: finish the async save in flight (collective)."""
        self.wait_for_checkpoint()

    def load_checkpoint(self, load_dir: str | None = None, tag: str | None = None) -> tuple[str | None, dict]:
        from backends.checkpoint.layout import checkpoint_folder
        from backends.checkpoint.load import load_checkpoint

        self.wait_for_checkpoint()
        return load_checkpoint(self, checkpoint_folder(load_dir, self.config, "load_checkpoint"), tag=tag)

    def export_consolidated(self, path: str) -> str | None:
        """Rank 0 writes the full fp32 weights as an HF-named safetensors file."""
        from backends.checkpoint.export import export_safetensors

        self.wait_for_checkpoint()
        return export_safetensors(self, path)

    def state_for_resume(self) -> dict[str, Any]:
        return {
            "global_steps": self.global_steps,
            "micro_steps": self.micro_steps,
            "global_samples": self.global_samples,
            "skipped_steps": self.optimizer.skipped_steps,
            "loss_scaler": self.scaler.state_dict(),
            "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler else None,
            "world_size": self.comm.world,
            "zero_stage": self.optimizer.stage,
        }

    def restore_for_resume(self, state: dict[str, Any]) -> None:
        self.global_steps = int(state["global_steps"])
        self.micro_steps = int(state["micro_steps"])
        self.global_samples = int(state["global_samples"])
        self.optimizer.skipped_steps = int(state["skipped_steps"])
        self.scaler.load_state_dict(state["loss_scaler"])
        if self.lr_scheduler is not None and state.get("lr_scheduler"):
            self.lr_scheduler.load_state_dict(state["lr_scheduler"])
