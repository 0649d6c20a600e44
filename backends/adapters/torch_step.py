"""The optimizer step of the adapters that run a plain torch optimizer on a wrapped model (DDP, FSDP2).

Forward and backward over the micro-batches (gradient sync only on the last
one), the loss averaged over micro-batches and ranks, the gradient's global
norm, then the guard, and only then clipping and the update. fp16 runs
unscale first and leave an overflowing step to torch's GradScaler, which is
not an anomaly. Checkpoints are torch.distributed.checkpoint folders of the
model and optimizer state dicts (sharded where the wrapper shards them).
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from backends.adapters.base import Adapter, Guard, StepOutcome, tensor_bytes

STATE_FOLDER = "torch_state"


class TorchAdapter(Adapter):
    """Subclasses set self.model (wrapped), self.module (the HF model) and call self.finish_setup()."""

    def finish_setup(self) -> None:
        import torch

        from backends.parts.optimizers import build_torch_optimizer

        config = self.setup.engine_config
        self.optimizer = build_torch_optimizer(self.model.parameters(), config.optimizer)
        self.clip = config.gradient_clipping
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(config.compute_dtype_name)
        self.autocast_dtype = dtype if self.uses_autocast() else None
        self.scaler = torch.amp.GradScaler(self.device.type) if config.fp16.enabled else None

    def uses_autocast(self) -> bool:
        return True

    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    def sync_context(self, boundary: bool) -> Any:
        return nullcontext()

    def forward(self, batch: dict) -> Any:
        import torch

        inputs = {key: value.to(self.device) for key, value in batch.items()}
        if self.autocast_dtype is None:
            return self.model(**inputs).loss
        with torch.autocast(self.device.type, dtype=self.autocast_dtype):
            return self.model(**inputs).loss

    def grad_norm(self) -> float:
        import torch

        parameters = [p for p in self.model.parameters() if p.grad is not None]
        max_norm = self.clip if self.clip > 0 else math.inf
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm) if parameters else torch.zeros(())
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        return float(norm)

    def train_step(self, micro_batches: list[dict], guard: Guard) -> StepOutcome:
        began = time.perf_counter()
        total: Any = 0.0
        for index, batch in enumerate(micro_batches):
            with self.sync_context(index == len(micro_batches) - 1):
                loss = self.forward(batch)
                scaled = loss / len(micro_batches)
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            total = total + loss.detach().float()  # stays on the device: one sync per step, not per micro-batch
        mean = self.mean_over_data_ranks(float(total) / len(micro_batches))
        computed = self.synchronize()
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        norm = self.grad_norm()  # clips in place when clipping is on; the guard decides before any update
        overflow = self.scaler is not None and not math.isfinite(norm)
        applied = not overflow and guard(mean, norm)
        if self.scaler:
            if applied or overflow:
                self.scaler.step(self.optimizer)  # skips by itself on overflow
            self.scaler.update()
        elif applied:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        finished = self.synchronize()
        return StepOutcome(
            loss=mean,
            grad_norm=norm,
            applied=applied,
            compute_s=computed - began,
            optimizer_s=finished - computed,
            overflow=overflow,
        )

    def eval_loss(self, batch: dict) -> float:
        import torch

        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                return float(self.forward(batch))
        finally:
            self.model.train(was_training)

    # --- state -------------------------------------------------------------------------------
    def state_dicts(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        state = {"model": model_state, "optimizer": optimizer_state}
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        return state

    def save(self, folder: Path) -> None:
        import torch.distributed.checkpoint as dcp

        from backends.ranks import dcp_quietly

        with dcp_quietly():
            dcp.save(self.state_dicts(), checkpoint_id=str(folder / STATE_FOLDER), no_dist=not self.distributed)

    def load(self, folder: Path) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        from backends.ranks import dcp_quietly

        state = self.state_dicts()
        with dcp_quietly():
            dcp.load(state, checkpoint_id=str(folder / STATE_FOLDER), no_dist=not self.distributed)
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])

    def held_bytes(self) -> int:
        params = list(self.model.parameters())
        states = [value for state in self.optimizer.state.values() for value in state.values()]
        return tensor_bytes(params) + tensor_bytes(p.grad for p in params) + tensor_bytes(states)
