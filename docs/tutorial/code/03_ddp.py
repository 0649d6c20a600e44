"""Chapter 3: DistributedDataParallel: one process per device, each on its share of the batch.

Run with `torchrun --nproc_per_node=2 03_ddp.py`. Each rank takes every
other sample of the global batch; backward all-reduces (averages) the
gradients in buckets while it runs, so every rank applies the same update
and the model stays identical, the loss being chapter 1's.
"""

import torch.distributed as dist
from common import LR, StepTimer, batches, build_model, loss_of, planner_prediction, say
from torch.nn.parallel import DistributedDataParallel
from torch.optim import AdamW

dist.init_process_group("gloo")  # "nccl" on GPUs
rank, world = dist.get_rank(), dist.get_world_size()
model = DistributedDataParallel(build_model())  # broadcasts rank 0's weights; hooks reduce the gradients
optimizer = AdamW(model.parameters(), lr=LR)
timer = StepTimer()
for step, (inputs, targets) in enumerate(batches(), 1):
    mine = slice(rank, None, world)  # this rank's samples
    loss = loss_of(model(inputs[mine]), targets[mine])
    loss.backward()  # the all-reduce of the gradients happens here
    optimizer.step()
    optimizer.zero_grad()
    average = loss.detach().clone()
    dist.all_reduce(average)
    timer.lap()
    say(f"step {step} loss {average.item() / world:.6f}")
say(timer.summary())
say(planner_prediction("ddp", world))
dist.destroy_process_group()
