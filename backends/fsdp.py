"""Adapter: FSDP2 (`fully_shard`) on every transformer block and the root, over a device mesh (CPU: gloo)."""

from __future__ import annotations

from typing import Any, Optional

from planner.errors import UserInputError

from .adapter import Adapter
from .config import EngineConfig
from .optimizers import build_torch_optimizer


class FsdpAdapter(Adapter):
    name = "fsdp"

    def __init__(self, model: Any, config: EngineConfig, *, metrics_path: Optional[str] = None,
                 reshard_after_forward: bool = True):
        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        from .activation_checkpointing import apply_activation_checkpointing
        from .zero.flat_unit import repeated_blocks

        super().__init__(config, metrics_path=metrics_path)
        if config.fp16.enabled:
            raise UserInputError("the FSDP adapter runs fp32 or bf16; use --precision bf16-mixed with FSDP")
        device_type = config.hardware_selector.device
        self.device = torch.device("cuda", torch.cuda.current_device()) if device_type == "cuda" else torch.device("cpu")
        model = model.to(self.device)
        apply_activation_checkpointing(model, config.hardware_selector.activation_checkpointing)
        mesh = init_device_mesh(device_type, (dist.get_world_size(),))
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if config.bf16.enabled else MixedPrecisionPolicy()
        for block in repeated_blocks(model):
            fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
        self.model = fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
        self.optimizer = build_torch_optimizer(self.model.parameters(), config.optimizer)
        self.schedule(self.optimizer)

    def forward(self, ids: Any) -> Any:
        return self.model(input_ids=ids, labels=ids).loss

    def backward(self, loss: Any) -> None:
        (loss / self.grad_accum).backward()

    def sync_context(self, boundary: bool) -> Any:
        from contextlib import nullcontext

        self.model.set_requires_gradient_sync(boundary)  # no reduce-scatter between boundaries
        return nullcontext()

    def optimizer_step(self) -> None:
        import torch

        if self.config.gradient_clipping > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.gradient_clipping)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def tracked_bytes(self) -> int:
        local = [p.to_local() if hasattr(p, "to_local") else p for p in self.model.parameters()]
        total = sum(t.numel() * t.element_size() for t in local)
        for state in self.optimizer.state.values():
            for value in state.values():
                value = value.to_local() if hasattr(value, "to_local") else value
                total += value.numel() * value.element_size() if hasattr(value, "numel") else 0
        return total
