"""Adapter: DeepSpeed's own engine (`deepspeed.initialize`), driven by the run folder's ds_config.json.

The config is the folder's ds_config.json (or the keys derived from the run's
engine config), with the batch keys of this run, no scheduler (the runner
sets the learning rate every step, as for every adapter) and, on the CPU, a
torch optimizer in place of DeepSpeed's compiled ones. An optimizer block or
clipping in ds_config.json that disagrees with the run's hyperparameters is
a one-line error rather than a silently different run.

DeepSpeed applies the update inside `engine.step()` and only then reports
the gradient norm, so the runner's anomaly rules see the loss before the
update and the norm after it (`skip-step` is refused up front).
A pretrained ZeRO-3 run builds the model inside `deepspeed.zero.Init` and
fills each rank's flat partition from the checkpoint.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from backends.adapters.base import Adapter, AdapterSetup, Guard, StepOutcome, tensor_bytes
from planner.contract.engine_config import EngineConfig
from planner.errors import UserInputError

STATE_TAG = "deepspeed"


def deepspeed_keys(config: EngineConfig) -> dict[str, Any]:
    """The DeepSpeed part of an engine config: our block dropped, optimizer params limited to its type's."""
    document = json.loads(config.model_dump_json(exclude={"hardware_selector"}, exclude_none=True))
    zero = document.get("zero_optimization", {})
    if config.zero_optimization.offload_optimizer.device == "none":
        zero.pop("offload_optimizer", None)
    wanted = (
        ("lr", "momentum", "dampening", "weight_decay", "nesterov")
        if config.optimizer.type == "SGD"
        else ("lr", "betas", "eps", "weight_decay")
    )
    params = document["optimizer"]["params"]
    document["optimizer"]["params"] = {key: params[key] for key in wanted if key in params}
    return document


def check_agrees(document: dict[str, Any], config: EngineConfig, origin: str) -> None:
    """ds_config.json's optimizer and clipping must be the run's (the runner takes its numbers from plan.json)."""
    ours = deepspeed_keys(config)
    block = document.get("optimizer")
    if isinstance(block, dict):
        for key, value in (block.get("params") or {}).items():
            expected = ours["optimizer"]["params"].get(key)
            if expected is not None and value != "auto" and _differs(value, expected):
                raise UserInputError(
                    f"{origin} sets optimizer {key} {value} but the run's is {expected}; "
                    "change both, or use `train --lr ...` which rewrites neither"
                )
    clip = document.get("gradient_clipping")
    if clip not in (None, "auto") and _differs(clip, config.gradient_clipping):
        raise UserInputError(
            f"{origin} sets gradient_clipping {clip} but the run's is {config.gradient_clipping}; make them agree"
        )


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) != len(b) or any(_differs(x, y) for x, y in zip(a, b))
    try:
        return not math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    except (TypeError, ValueError):
        return a != b


class DeepSpeedAdapter(Adapter):
    name = "deepspeed"
    supports_skip_before_update = False

    def __init__(self, setup: AdapterSetup):
        import deepspeed

        from backends.adapters.deepspeed_cuda_only import refuse_cuda_only_keys_on_cpu
        from backends.cpu_distributed import skip_deepspeed_shm_build
        from backends.parallelize import ParallelizeConfig, parallelize
        from backends.parts.optimizers import build_torch_optimizer
        from planner.contract.layout import ParallelDims

        super().__init__(setup)
        config = setup.engine_config
        if self.device.type == "cpu":
            refuse_cuda_only_keys_on_cpu(setup.ds_config)  # ZeRO++'s quantizer: before DeepSpeed fails in a gather
            skip_deepspeed_shm_build()
        deepspeed.init_distributed(dist_backend=setup.run.dist_backend)
        document = dict(setup.ds_config) if setup.ds_config is not None else deepspeed_keys(config)
        check_agrees(document, config, "ds_config.json")
        document.pop("scheduler", None)
        document["train_micro_batch_size_per_gpu"] = self.micro_batch
        document["gradient_accumulation_steps"] = self.grad_accum
        document["train_batch_size"] = self.micro_batch * self.grad_accum * self.world
        document["gradient_clipping"] = config.gradient_clipping
        stage = int(document.get("zero_optimization", {}).get("stage", 0))
        module = self._build(setup, document, stage)
        # AC and kernels here; DeepSpeed's ZeRO is the data-parallel step, in deepspeed.initialize below.
        parallelize(module, ParallelDims(), ParallelizeConfig.of_replica(setup.plan.config, self.device.type))
        client_optimizer = None
        if self.device.type == "cpu" or "optimizer" not in document:
            # DeepSpeed's own optimizers are compiled C++/CUDA ops; on the CPU hand it torch's.
            document.pop("optimizer", None)
            document["zero_force_ds_cpu_optimizer"] = False
            client_optimizer = build_torch_optimizer(module.parameters(), config.optimizer)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=module,
            optimizer=client_optimizer,
            model_parameters=None if client_optimizer else module.parameters(),
            config=document,
        )
        self.stage = stage

    def _build(self, setup: AdapterSetup, document: dict, stage: int) -> Any:
        import deepspeed

        from backends.weights.model_init import load_full
        from backends.weights.source import source_for

        if setup.weights_folder is None:
            return setup.make_model(empty=False)
        if stage < 3:
            module = setup.make_model(empty=True)
            return load_full(module, source_for(module, setup.weights_folder), self.device)
        import torch._dynamo  # noqa: F401  (imported inside zero.Init, dynamo rejects its patched Tensor.__new__)

        setup.make_model(empty=True)  # loads the model's transformers modules before the patching starts
        with deepspeed.zero.Init(config_dict_or_path=document, remote_device=None):
            module = setup.make_model(empty=False)
        self._load_partitions(module, source_for(module, setup.weights_folder))
        return module

    def _load_partitions(self, module: Any, source: Any) -> None:
        """ZeRO-3: rank r holds elements [r*p, (r+1)*p) of each flattened parameter (p = ceil(numel / world))."""
        import torch

        for name, param in module.named_parameters():
            source.check_shape(name, tuple(param.ds_shape))
        with torch.no_grad():
            for name, param in module.named_parameters():
                local = param.ds_tensor
                size = local.ds_numel
                start = size * self.rank
                count = max(0, min(param.ds_numel, start + size) - start)
                if count:
                    local[:count].copy_(source.read_flat(name, start, start + count).to(local.dtype))

    def param_groups(self) -> list[dict]:
        return self.engine.optimizer.param_groups

    def _loss(self, batch: dict) -> Any:
        inputs = {key: value.to(self.engine.device) for key, value in batch.items()}
        return self.engine(**inputs).loss

    def train_step(self, micro_batches: list[dict], guard: Guard) -> StepOutcome:
        began = time.perf_counter()
        total: Any = 0.0
        for index, batch in enumerate(micro_batches):
            loss = self._loss(batch)
            total = total + loss.detach().float()
            if index == len(micro_batches) - 1:
                mean = self.mean_over_data_ranks(float(total) / len(micro_batches))
                if not guard(mean, None):  # the loss rules, before DeepSpeed's update
                    return StepOutcome(
                        loss=mean,
                        grad_norm=None,
                        applied=False,
                        compute_s=self.synchronize() - began,
                        optimizer_s=0.0,
                        norm_checked_before_update=False,
                    )
            self.engine.backward(loss)  # scales by 1/grad_accum itself
            if index < len(micro_batches) - 1:
                self.engine.step()  # counts the micro-step; no update before the boundary
        computed = self.synchronize()
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        norm = float(norm) if norm is not None else None
        applied = bool(self.engine.was_step_applied())
        finished = self.synchronize()
        return StepOutcome(
            loss=mean,
            grad_norm=norm,
            applied=applied,
            compute_s=computed - began,
            optimizer_s=finished - computed,
            overflow=not applied,
            norm_checked_before_update=False,
        )

    def eval_loss(self, batch: dict) -> float:
        import torch

        self.engine.eval()
        try:
            with torch.no_grad():
                return float(self._loss(batch))
        finally:
            self.engine.train()

    def save(self, folder: Path) -> None:
        self.engine.save_checkpoint(str(folder), tag=STATE_TAG, save_latest=False)

    def load(self, folder: Path) -> None:
        path, _ = self.engine.load_checkpoint(
            str(folder), tag=STATE_TAG, load_optimizer_states=True, load_lr_scheduler_states=False
        )
        if path is None:
            raise UserInputError(f"{folder} holds no DeepSpeed state; it was saved by another strategy")

    def full_state_dict(self) -> dict[str, Any] | None:
        module = self.engine.module
        if self.stage < 3:
            return (
                {name: value.detach().cpu() for name, value in module.state_dict().items()} if self.rank == 0 else None
            )
        import deepspeed

        state = {}
        for name, param in module.named_parameters():  # one parameter gathered at a time
            with deepspeed.zero.GatheredParameters([param], modifier_rank=None):
                if self.rank == 0:
                    state[name] = param.detach().clone().cpu()
        return state if self.rank == 0 else None

    def held_bytes(self) -> int:
        params = list(self.engine.module.parameters())
        return tensor_bytes(getattr(p, "ds_tensor", None) if hasattr(p, "ds_tensor") else p for p in params)
