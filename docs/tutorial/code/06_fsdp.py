"""Chapter 6: FSDP: data parallel, but each rank keeps only a shard of the weights, gradients and Adam state.

Run with `torchrun --nproc_per_node=2 06_fsdp.py`. fully_shard on each
block, then on the whole model: before a block runs forward (and again in
backward) its shards are all-gathered into whole weights and freed after;
gradients are reduce-scattered so each rank gets the average for its shard
only, and the optimizer steps its shard. Memory per rank for the model's
states falls by the number of ranks; the loss is chapter 1's.
"""

import torch.distributed as dist
from common import LR, StepTimer, batches, build_model, loss_of, planner_prediction, say
from torch.distributed.fsdp import fully_shard
from torch.optim import AdamW

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
model = build_model()
for block in model.blocks:
    fully_shard(block)  # one all-gather per block: only one block's weights are whole at a time
fully_shard(model)  # the rest (embeddings, head) as one more unit
optimizer = AdamW(model.parameters(), lr=LR)  # over this rank's shards (DTensors)
shard = sum(p.to_local().numel() for p in model.parameters())
timer = StepTimer()
for step, (inputs, targets) in enumerate(batches(), 1):
    mine = slice(rank, None, world)
    loss = loss_of(model(inputs[mine]), targets[mine])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    average = loss.detach().clone()
    dist.all_reduce(average)
    timer.lap()
    say(f"step {step} loss {average.item() / world:.6f}")
say(f"parameters held by this rank: {shard:,} of {sum(p.numel() for p in model.parameters()):,}")
say(timer.summary())
say(planner_prediction("fsdp", world))
dist.destroy_process_group()
