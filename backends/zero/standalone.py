"""ZeroOptimizer: ZeRO stage 1, 2 or 3 around a torch optimizer class, in a loop of your own (no engine).

    zero = ZeroOptimizer(torch.optim.AdamW, model.parameters(), stage=2, lr=1e-3)   # stage 3: pass the model
    loss = model(x)
    zero.backward(loss)            # reduces (stage 1: all-reduce; 2 and 3: reduce-scatter) the gradients
    zero.step()                    # steps this rank's partition and publishes the updated weights

The optimizer runs on each rank's flat partition of the fp32 master weights,
so it must update each element from that element's own state: SGD, Adam,
AdamW, Adagrad, RMSprop, Adamax, NAdam, RAdam, Adadelta. Optimizers that look
at whole tensors (LAMB's trust ratio, Adafactor's factored moments, Shampoo)
are refused in one line. Stage 3 gathers each block around its forward, so
it needs the module. The data-parallel group is the default process group
(or process_group=...); without torch.distributed it runs in one process.
It is the class the engine uses (backends/zero/), with the engine's loss
scaling, clipping (max_grad_norm) and accumulation (backward(loss,
accumulate=True) holds the reduction until the last micro-batch).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

ELEMENT_WISE = ("SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Adamax", "NAdam", "RAdam", "Adadelta")


class ZeroOptimizer:
    def __init__(
        self,
        optimizer_cls: type,
        params: Any,
        *,
        stage: int = 1,
        max_grad_norm: float = 0.0,
        process_group: Any = None,
        **optimizer_kwargs: Any,
    ):
        import torch

        from backends.parts.mixed_precision import LossScaler, compute_dtype
        from backends.zero import zero_optimizer_class
        from backends.zero.comm import DataParallelComm
        from planner.contract.engine_config import EngineConfig
        from planner.errors import UserInputError

        if isinstance(optimizer_cls, torch.optim.Optimizer):
            raise UserInputError(
                f"ZeroOptimizer takes the optimizer's class and its arguments, e.g. ZeroOptimizer(torch.optim."
                f"{type(optimizer_cls).__name__}, model.parameters(), lr=...), not an optimizer already built"
            )
        if getattr(optimizer_cls, "__name__", None) not in ELEMENT_WISE:
            raise UserInputError(
                f"ZeroOptimizer steps flat partitions, so the optimizer must be element-wise "
                f"({', '.join(ELEMENT_WISE)}); {getattr(optimizer_cls, '__name__', optimizer_cls)} is not"
            )
        if not isinstance(stage, int) or isinstance(stage, bool) or stage not in (1, 2, 3):
            raise UserInputError(f"stage must be 1, 2 or 3, not {stage!r}")
        if (
            isinstance(max_grad_norm, bool)
            or not isinstance(max_grad_norm, (int, float))
            or not (0 <= max_grad_norm < float("inf"))
        ):
            raise UserInputError(f"max_grad_norm must be a number of 0 or more (0: no clipping), not {max_grad_norm!r}")
        if isinstance(params, torch.nn.Module):
            model = params
        elif stage == 3:
            raise UserInputError("stage 3 gathers each block around its forward: pass the model, not its parameters")
        else:
            listed = list(params) if isinstance(params, Iterable) and not isinstance(params, (str, bytes)) else None
            if not listed or not all(isinstance(param, torch.nn.Parameter) for param in listed):
                raise UserInputError(
                    "params must be the model's parameters (model.parameters(), not yet consumed) or, for stage 3, "
                    f"the model; got {'nothing' if listed == [] else repr(params)[:80]}"
                )
            model = torch.nn.Module()
            model.params = torch.nn.ParameterList(listed)  # the same Parameter objects: the model sees updates
        config = EngineConfig.model_validate(
            {"zero_optimization": {"stage": stage}, "gradient_clipping": max_grad_norm}
        )
        self.optimizer_factory = lambda flat: optimizer_cls(flat, **optimizer_kwargs)
        inner_class = zero_optimizer_class(stage)
        zero = inner_class.__new__(inner_class)
        zero.optimizer_factory = self.optimizer_factory
        inner_class.__init__(
            zero, model, config, DataParallelComm(process_group), compute_dtype(config), LossScaler(config)
        )
        self.zero = zero
        self.stage = stage
        if stage == 3:  # the root unit (embeddings, head, anything outside the blocks) is gathered per forward
            model.register_forward_pre_hook(lambda module, args: zero.begin_forward())

    @property
    def param_groups(self) -> list[dict]:
        return self.zero.param_groups

    @property
    def state(self) -> Any:
        return self.zero.state

    def backward(self, loss: Any, accumulate: bool = False) -> None:
        """Backward of the loss, or of the model's whole output (its .loss), as engine.backward takes it;
        accumulate=True for every micro-batch but the last of a step (to accumulate, divide each micro-batch's
        loss by their number, as in any accumulation loop, and pass that loss)."""
        from backends.parts.loss import loss_of

        boundary = not accumulate
        scalar = loss_of(loss)  # an HF output raised AttributeError: 'CausalLMOutputWithPast' ... 'backward'
        self.zero.begin_backward(boundary)
        scalar.backward()
        self.zero.end_backward(boundary)

    def step(self) -> bool:
        """Apply the reduced gradients (averaged over the ranks); False when it was skipped (fp16 overflow)."""
        applied = self.zero.step()
        self.zero.zero_grad()
        return applied

    def zero_grad(self) -> None:
        self.zero.zero_grad()

    # --- checkpoints (backends.CheckpointManager saves and loads a ZeroOptimizer through these) -------------
    def checkpoint_views(self) -> dict[str, Any]:
        """Key -> tensor over this rank's own storage: the fp32 master weights and the optimizer's states, each
        unit's a DTensor sharded on dim 0 over the ranks (backends/checkpoint/shards.py), so torch's checkpoint
        writes each rank's partition once and reads them back at any world size."""
        from backends.checkpoint.shards import sharded_views

        return sharded_views(self._as_engine())

    def loaded(self, loaded: dict[str, Any], views: dict[str, Any]) -> None:
        """After torch's checkpoint filled `views`: the model's parameters take the restored master weights."""
        from backends.checkpoint.shards import copy_back

        copy_back(loaded, views)
        self.zero.publish_parameters()

    def _as_engine(self) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(optimizer=self.zero, comm=self.zero.comm, device=self.zero.device, parallel_model=None)

    def gathered_parameters(self) -> None:
        """Stage 3: make every parameter whole (for evaluation or export); release_parameters() after."""
        if self.stage == 3:
            self.zero.gathered_parameters()

    def release_parameters(self) -> None:
        if self.stage == 3:
            self.zero.release_parameters()
