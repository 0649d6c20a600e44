"""Chapter 7: ZeRO on our engine: DeepSpeed's three stages, with DeepSpeed's API.

Run with `torchrun --nproc_per_node=2 07_zero_engine.py [1|2|3]`. Stage 1
shards the Adam state, stage 2 the gradients too (reduce-scattered), stage 3
the weights as well (gathered block by block, like FSDP). The engine takes
deepspeed.initialize's arguments and a DeepSpeed config, so this loop is a
DeepSpeed loop (docs/engine.md); the loss is chapter 1's at every stage.
"""

import sys

import torch
import torch.distributed as dist
from common import GLOBAL_BATCH, LR, StepTimer, batches, build_model, loss_of, planner_prediction, say
from torch import nn

import backends


class WithLoss(nn.Module):
    """DeepSpeed engines train a module that returns its loss."""

    def __init__(self):
        super().__init__()
        self.gpt = build_model()

    def forward(self, inputs, targets):
        return loss_of(self.gpt(inputs), targets)


stage = int(sys.argv[1]) if len(sys.argv) > 1 else 2
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
model = WithLoss()
config = {"train_batch_size": GLOBAL_BATCH, "zero_optimization": {"stage": stage}}
engine, *_ = backends.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=LR), config=config)
timer = StepTimer()
for step, (inputs, targets) in enumerate(batches(), 1):
    mine = slice(rank, None, world)
    loss = engine(inputs[mine], targets[mine])
    engine.backward(loss)
    engine.step()
    timer.lap()
    say(f"step {step} loss {engine.last_loss:.6f}")
say(f"bytes of weights, gradients and Adam state held by this rank: {engine.optimizer.tracked_bytes():,}")
say(timer.summary())
say(planner_prediction("engine", world, zero_stage=str(stage)))
dist.destroy_process_group()
