"""1-bit Adam (Tang et al. 2021, arXiv 2102.02888): Adam whose data-parallel traffic, after a warm-up, is the
momentum compressed to signs instead of the gradient (docs/parallelism.md, "Gradient compression").

Sign-compressing the gradient breaks Adam: the variance, a running mean of the squared gradient, is then taken
of the compressed values and the per-element step size swings (measured +14% loss on ZeRO-0). 1-bit Adam
instead:

1. warm-up (`freeze_step` optimizer steps): plain Adam on the exactly averaged gradient; the variance settles;
2. after it, the variance is FROZEN, and each rank folds its LOCAL gradient into its momentum,
   m = b1 m + (1 - b1) g_local; the momenta are averaged by the two-phase compressed all-reduce
   (backends/parts/compressed_sum.py, error feedback on the worker and the server side), so the average is
   b1 m + (1 - b1) mean(g) up to the fed-back compression error; the update is m / (sqrt(v_frozen) + eps).

Otherwise torch's AdamW, as the engine's uncompressed runs use it (backends/parts/optimizers.py): weight decay
decoupled (or added to the gradient when adam_w_mode is false), and torch's bias correction: m by 1 - b1^t with
t the step, v by 1 - b2^min(t, freeze_step), the correction it had when it was frozen. DeepSpeed's OnebitAdam
applies no bias correction at all; ours keeps the warm-up identical to AdamW's and the step size continuous
at the freeze. The warm-up's arithmetic follows torch's single-tensor Adam line by line, so the warm-up
matches an AdamW run to the last bit (tests/test_onebit_adam.py).

It needs every rank's whole momentum, so it runs under ZeRO-0 only (ZeRO-1/2/3 shard the optimizer state;
planner/contract/engine_config.py refuses onebit there). The compression residuals live in the
CompressedSum, not in the optimizer's state: a checkpoint does not carry them, and they start from zero after
a resume, as DeepSpeed's OnebitAdam resets them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

# (key, start, end) of a segment of the flat parameter averaged as one compressed all-reduce: one per ZeRO unit,
# so the sum's temporaries are one bucket's size, not the model's.
Segment = tuple[Any, int, int]
# (key, this rank's momentum segment) -> the mean of that segment over the data-parallel ranks.
Average = Callable[[Any, torch.Tensor], torch.Tensor]


class OneBitAdam(torch.optim.Optimizer):
    """1-bit Adam over one flat fp32 parameter (the ZeRO-0 master). `average` is None on one rank (nothing to
    average: the frozen-variance update alone)."""

    def __init__(
        self,
        params: Any,
        *,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        decoupled: bool,
        freeze_step: int,
        segments: Sequence[Segment] = (),
        average: Average | None = None,
    ):
        if freeze_step < 1:
            # v is zero before the first step: a frozen zero variance divides the momentum by eps.
            raise ValueError("1-bit Adam needs at least one warm-up step (compression_warmup_steps >= 1)")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "decoupled": decoupled}
        super().__init__(params, defaults)
        self.freeze_step = freeze_step
        self.segments = list(segments)
        self.average = average

    def _steps_taken(self) -> int:
        for group in self.param_groups:
            for param in group["params"]:
                state = self.state.get(param)
                if state:
                    return int(state["step"].item())
        return 0

    @property
    def frozen(self) -> bool:
        """The next step is a compressed one: the caller must hand it LOCAL gradients, not averaged ones. Read
        from the step count, which checkpoints restore (a resumed run does not warm up again)."""
        return self._steps_taken() >= self.freeze_step

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad
                state = self.state[param]
                if not state:  # the names and types torch's Adam uses, so checkpoints read alike
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                state["step"] += 1
                step = int(state["step"].item())
                if decay != 0:
                    if group["decoupled"]:
                        param.mul_(1 - lr * decay)
                    else:
                        grad = grad.add(param, alpha=decay)
                exp_avg.lerp_(grad, 1 - beta1)
                if step <= self.freeze_step:  # warm-up: grad is the average over ranks; v learns from it
                    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                elif self.average is not None:  # grad was this rank's own: average the momenta, compressed
                    for key, start, end in self.segments:
                        exp_avg[start:end].copy_(self.average(key, exp_avg[start:end]))
                bias_correction1 = 1 - beta1**step
                bias_correction2 = 1 - beta2 ** min(step, self.freeze_step)  # frozen with v
                denom = (exp_avg_sq.sqrt() / bias_correction2**0.5).add_(eps)
                param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)
        return loss


def build_onebit_adam(master: Any, block: Any, freeze_step: int, segments: Sequence[Segment], summer: Any) -> Any:
    """The engine's 1-bit Adam from engine.json's optimizer block (Adam / AdamW: DeepSpeed's meaning, as in
    backends/parts/optimizers.py) and its CompressedSum (None on one rank)."""
    if block.type == "SGD":
        raise ValueError("compression 'onebit' is 1-bit Adam: it needs optimizer type Adam or AdamW, not SGD")
    options = block.params
    average = None
    if summer is not None:
        world = summer.world

        def average(key: Any, momentum: torch.Tensor) -> torch.Tensor:
            return summer.all_reduce(key, momentum) / world

    return OneBitAdam(
        [master],
        lr=options.lr,
        betas=tuple(options.betas),
        eps=options.eps,
        weight_decay=options.weight_decay,
        decoupled=block.type == "AdamW" or options.adam_w_mode,
        freeze_step=freeze_step,
        segments=segments,
        average=average,
    )


def onebit_adam_for_zero(master: Any, segments: Sequence[Segment], comm: Any, stage: int, config: Any) -> tuple:
    """ZeroOptimizer's 1-bit Adam over its flat master and the CompressedSum its momenta travel in (None on one
    rank). ZeRO-0 only: every rank needs the whole momentum (engine.json refuses onebit at other stages:
    planner/contract/engine_config.py)."""
    from backends.parts.compressed_sum import CompressedSum

    if stage != 0:
        raise ValueError(f"compression 'onebit' (1-bit Adam) runs on ZeRO-0 only, not ZeRO-{stage}")
    summer = CompressedSum("onebit", comm.group) if comm.world > 1 else None
    freeze_step = config.hardware_selector.compression_warmup_steps
    return build_onebit_adam(master, config.optimizer, freeze_step, segments, summer), summer
