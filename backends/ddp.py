"""Adapter: torch DistributedDataParallel with the engine config's optimizer, clipping and precision."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Optional

from .adapter import Adapter
from .config import EngineConfig
from .optimizers import build_torch_optimizer


class DdpAdapter(Adapter):
    name = "ddp"

    def __init__(self, model: Any, config: EngineConfig, *, metrics_path: Optional[str] = None):
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        super().__init__(config, metrics_path=metrics_path)
        cuda = config.hardware_selector.device == "cuda"
        self.device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        model = model.to(self.device)
        self.model = DistributedDataParallel(model, device_ids=[self.device.index] if cuda else None) \
            if dist.is_initialized() else model
        self.optimizer = build_torch_optimizer(self.model.parameters(), config.optimizer)
        self.schedule(self.optimizer)
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(config.compute_dtype_name)
        self.autocast = (lambda: torch.autocast(self.device.type, dtype=dtype)) if dtype else nullcontext
        self.scaler = torch.amp.GradScaler(self.device.type) if config.fp16.enabled else None

    def sync_context(self, boundary: bool) -> Any:
        return nullcontext() if boundary or not hasattr(self.model, "no_sync") else self.model.no_sync()

    def forward(self, ids: Any) -> Any:
        with self.autocast():
            return self.model(input_ids=ids, labels=ids).loss

    def backward(self, loss: Any) -> None:
        scaled = loss / self.grad_accum
        (self.scaler.scale(scaled) if self.scaler else scaled).backward()

    def optimizer_step(self) -> None:
        import torch

        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        if self.config.gradient_clipping > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.gradient_clipping)
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def tracked_bytes(self) -> int:
        tensors = [p for p in self.model.parameters()] + [p.grad for p in self.model.parameters() if p.grad is not None]
        for state in self.optimizer.state.values():
            tensors += [v for v in state.values() if hasattr(v, "numel")]
        return sum(t.numel() * t.element_size() for t in tensors)
