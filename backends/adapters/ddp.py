"""Adapter: torch DistributedDataParallel, every rank holding the whole model (torch_step.py has the step)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from .base import AdapterSetup
from .torch_step import TorchAdapter


class DdpAdapter(TorchAdapter):
    name = "ddp"

    def __init__(self, setup: AdapterSetup):
        from torch.nn.parallel import DistributedDataParallel

        from backends.activation_checkpointing import apply_activation_checkpointing
        from backends.kernels import apply_kernels
        from backends.runner.model_init import load_full
        from backends.runner.weights import source_for

        super().__init__(setup)
        module = setup.make_model(empty=setup.weights_folder is not None)
        if setup.weights_folder is not None:
            load_full(module, source_for(module, setup.weights_folder), self.device)
        module = module.to(self.device)
        apply_activation_checkpointing(module, setup.plan.config.activation_checkpointing.value)
        apply_kernels(module, setup.plan.config.kernels.value, self.device.type)
        self.module = module
        cuda = self.device.type == "cuda"
        self.model = (
            DistributedDataParallel(module, device_ids=[self.device.index] if cuda else None)
            if self.distributed
            else module
        )
        self.finish_setup()

    def sync_context(self, boundary: bool) -> Any:
        return nullcontext() if boundary or not self.distributed else self.model.no_sync()

    def full_state_dict(self) -> dict[str, Any] | None:
        if self.rank != 0:
            return None
        return {name: tensor.detach().cpu() for name, tensor in self.module.state_dict().items()}
