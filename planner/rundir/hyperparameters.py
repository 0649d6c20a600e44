"""The run's hyperparameters as DeepSpeed-style optimizer and scheduler blocks, computed in one place.

ds_config.json, engine.json and the runner all take their blocks from here,
so DeepSpeed, our engine, DDP and FSDP apply the same update with the same
learning rate at every step (backends/parts/schedulers.py implements DeepSpeed's
formulas for the adapters that are not DeepSpeed). The schedule's length
depends on the data when the run is sized in epochs, so the scheduler block
exists only once the total number of steps is known.
"""

from __future__ import annotations

from planner.contract.choices import OptimizerKind
from planner.contract.engine_config import OptimizerBlock, OptimizerParams, SchedulerBlock, SchedulerParams
from planner.contract.run_config import SGD_MOMENTUM, Hyperparameters


def optimizer_block(optim: Hyperparameters, kind: OptimizerKind) -> OptimizerBlock:
    """AdamW, or SGD with momentum for SGD plans (the others fall back to AdamW, as DeepSpeed's configs do)."""
    if kind is OptimizerKind.SGD:
        return OptimizerBlock(
            type="SGD",
            params=OptimizerParams(lr=optim.learning_rate, momentum=SGD_MOMENTUM, weight_decay=optim.weight_decay),
        )
    return OptimizerBlock(
        type="AdamW",
        params=OptimizerParams(
            lr=optim.learning_rate, betas=optim.betas, eps=optim.eps, weight_decay=optim.weight_decay
        ),
    )


def scheduler_block(optim: Hyperparameters, total_steps: int | None) -> SchedulerBlock | None:
    """Linear warmup, then cosine or linear decay to min_lr_ratio x lr (or constant); None if the length is unknown."""
    total = total_steps or optim.max_steps
    warmup = optim.warmup_for(total)
    if optim.schedule == "constant":
        return SchedulerBlock(
            type="WarmupLR",
            params=SchedulerParams(
                warmup_min_lr=0.0, warmup_max_lr=optim.learning_rate, warmup_num_steps=warmup, warmup_type="linear"
            ),
        )
    if total is None:
        return None
    if optim.schedule == "cosine":
        return SchedulerBlock(
            type="WarmupCosineLR",
            params=SchedulerParams(
                warmup_num_steps=warmup,
                warmup_type="linear",
                total_num_steps=total,
                warmup_min_ratio=0.0,
                cos_min_ratio=optim.min_lr_ratio,
            ),
        )
    return SchedulerBlock(
        type="WarmupDecayLR",
        params=SchedulerParams(
            warmup_min_lr=optim.learning_rate * optim.min_lr_ratio,
            warmup_max_lr=optim.learning_rate,
            warmup_num_steps=warmup,
            warmup_type="linear",
            total_num_steps=total,
        ),
    )
