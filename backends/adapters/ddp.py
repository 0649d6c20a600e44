"""Adapter: torch DistributedDataParallel, every rank holding the whole model (torch_step.py has the step)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from backends.adapters.base import AdapterSetup
from backends.adapters.torch_step import TorchAdapter
from planner.contract.layout import ParallelDims


class DdpAdapter(TorchAdapter):
    name = "ddp"

    def __init__(self, setup: AdapterSetup):
        from torch.nn.parallel import DistributedDataParallel

        from backends.parallelize import ParallelizeConfig, parallelize
        from backends.weights.model_init import load_full
        from backends.weights.source import source_for

        super().__init__(setup)
        module = setup.make_model(empty=setup.weights_folder is not None)
        if setup.weights_folder is not None:
            load_full(module, source_for(module, setup.weights_folder), self.device)
        self.module = module = module.to(self.device)
        cuda = self.device.type == "cuda"

        def replicate(model: Any) -> Any:
            return DistributedDataParallel(model, device_ids=[self.device.index] if cuda else None)

        config = ParallelizeConfig.of_replica(setup.plan.config, self.device.type)
        self.model = parallelize(module, ParallelDims(), config, shard=replicate if self.distributed else None).model
        self.finish_setup()

    def sync_context(self, boundary: bool) -> Any:
        return nullcontext() if boundary or not self.distributed else self.model.no_sync()

    def full_state_dict(self) -> dict[str, Any] | None:
        if self.rank != 0:
            return None
        return {name: tensor.detach().cpu() for name, tensor in self.module.state_dict().items()}
