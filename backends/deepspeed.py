"""Adapter: DeepSpeed's own engine, driven by the run folder's ds_config.json (or the engine config's keys)."""

from __future__ import annotations

import json
from typing import Any, Optional

from .adapter import Adapter
from .config import EngineConfig
from .optimizers import build_torch_optimizer


def deepspeed_keys(config: EngineConfig) -> dict[str, Any]:
    """The DeepSpeed part of an engine config: our block dropped, optimizer params limited to its type's."""
    document = json.loads(config.model_dump_json(exclude={"hardware_selector"}, exclude_none=True, exclude_unset=True))
    if config.zero_optimization.offload_optimizer.device == "none" and "zero_optimization" in document:
        document["zero_optimization"].pop("offload_optimizer", None)
    wanted = ("lr", "momentum", "dampening", "weight_decay", "nesterov") if config.optimizer.type == "SGD" \
        else ("lr", "betas", "eps", "weight_decay", "adam_w_mode", "torch_adam")
    optimizer = document.setdefault("optimizer", {"type": config.optimizer.type})
    params = optimizer.get("params", {})
    optimizer["params"] = {key: params[key] for key in wanted if key in params}
    return document


class DeepSpeedAdapter(Adapter):
    name = "deepspeed"

    def __init__(self, model: Any, config: EngineConfig, *, ds_config: Optional[dict] = None,
                 metrics_path: Optional[str] = None):
        import deepspeed

        from .cpu_distributed import skip_deepspeed_shm_build

        super().__init__(config, metrics_path=metrics_path)
        if config.hardware_selector.device == "cpu":
            skip_deepspeed_shm_build()
        deepspeed.init_distributed(dist_backend=config.hardware_selector.dist_backend)
        document = dict(ds_config or deepspeed_keys(config))
        if config.scheduler is not None and "scheduler" not in document:
            # The run folder's CPU ds_config omits it; use the same schedule the other adapters run.
            document["scheduler"] = deepspeed_keys(config)["scheduler"]
        client_optimizer = None
        if config.hardware_selector.device == "cpu" or "optimizer" not in document:
            # DeepSpeed's own optimizers are compiled C++/CUDA ops; on the CPU hand it torch's.
            document.pop("optimizer", None)
            document["zero_force_ds_cpu_optimizer"] = False
            client_optimizer = build_torch_optimizer(model.parameters(), config.optimizer)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=client_optimizer,
            model_parameters=None if client_optimizer else model.parameters(), config=document)
        self.device = self.engine.device

    def forward(self, ids: Any) -> Any:
        return self.engine(input_ids=ids, labels=ids).loss

    def backward(self, loss: Any) -> None:
        self.engine.backward(loss)  # DeepSpeed scales by 1/grad_accum itself
        self.engine.step()  # and steps only at its accumulation boundary

    def optimizer_step(self) -> None:
        pass

    def tracked_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.engine.module.parameters())
