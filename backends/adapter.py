"""The training loop every peer adapter shares (DDP, FSDP2, DeepSpeed), shaped like our Engine.

An adapter offers what backends.run needs from any engine: train_batch(list
of grad_accum micro-batches) -> loss averaged over micro-batches and ranks,
global_steps, global_samples and a StepMonitor writing the same JSONL
metrics, so runs on different engines compare line by line.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Optional

from .config import EngineConfig
from .monitor import StepMonitor


class Adapter:
    name = "adapter"

    def __init__(self, config: EngineConfig, *, metrics_path: Optional[str] = None):
        import torch.distributed as dist

        self.config = config
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        rank = dist.get_rank() if dist.is_initialized() else 0
        _, self.micro_batch, self.grad_accum = config.batch_sizes(self.world)
        self.monitor = StepMonitor(rank, metrics_path, config.hardware_selector.device)
        self.global_steps = 0
        self.global_samples = 0
        self.device: Any = None
        self.lr_scheduler: Any = None

    def schedule(self, optimizer: Any) -> None:
        """The config's DeepSpeed-style LR schedule on `optimizer` (DeepSpeed's adapter has its own)."""
        from .schedulers import WarmupSchedule

        if self.config.scheduler is not None:
            self.lr_scheduler = WarmupSchedule(optimizer, self.config.scheduler)

    # Subclasses fill these in.
    def sync_context(self, boundary: bool) -> Any:
        return nullcontext()

    def forward(self, ids: Any) -> Any:
        raise NotImplementedError

    def backward(self, loss: Any) -> None:
        raise NotImplementedError

    def optimizer_step(self) -> None:
        raise NotImplementedError

    def train_batch(self, micro_batches: list[Any]) -> float:
        import torch
        import torch.distributed as dist

        losses, tokens = [], 0
        for index, ids in enumerate(micro_batches):
            boundary = index == len(micro_batches) - 1
            ids = ids.to(self.device)
            tokens += ids.numel()
            with self.sync_context(boundary):
                with self.monitor.phase("forward"):
                    loss = self.forward(ids)
                with self.monitor.phase("backward"):
                    self.backward(loss)
            losses.append(float(loss.detach()))
        with self.monitor.phase("optimizer"):
            self.optimizer_step()
            if self.lr_scheduler is not None:
                self.lr_scheduler.step()
        self.global_steps += 1
        self.global_samples += self.micro_batch * self.grad_accum * self.world
        mean = torch.tensor([sum(losses) / len(losses)], dtype=torch.float64)
        if dist.is_initialized():
            dist.all_reduce(mean)
        loss = float(mean.item()) / self.world
        self.monitor.end_step(self.global_steps, loss=loss, tokens=tokens * self.world,
                              tracked_bytes=self.tracked_bytes())
        return loss

    def tracked_bytes(self) -> int:
        return 0
