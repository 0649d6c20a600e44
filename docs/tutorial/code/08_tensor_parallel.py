"""Chapter 8: tensor parallelism: every matrix of a block split across the ranks (Megatron-LM's layout).

Run with `torchrun --nproc_per_node=2 08_tensor_parallel.py`. q, k, v and
the MLP's first layer are split by columns (each rank computes its heads and
its half of the hidden units), the attention output and the MLP's second
layer by rows; one all-reduce after each row-split layer sums the partial
results. Each rank sees the whole batch and holds 1/tp of each block's
weights. torch's DTensor does the splitting (parallelize_module).
"""

import torch.distributed as dist
from common import LR, StepTimer, batches, build_model, loss_of, planner_prediction, say
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.optim import AdamW

dist.init_process_group("gloo")
world = dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
model = build_model()
for block in model.blocks:
    parallelize_module(
        block,
        mesh,
        {
            "q": ColwiseParallel(),
            "k": ColwiseParallel(),
            "v": ColwiseParallel(),
            "proj": RowwiseParallel(),
            "fc": ColwiseParallel(),
            "out": RowwiseParallel(),
        },
    )
optimizer = AdamW(model.parameters(), lr=LR)
timer = StepTimer()
for step, (inputs, targets) in enumerate(batches(), 1):
    loss = loss_of(model(inputs), targets)  # the whole batch on every rank
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    timer.lap()
    say(f"step {step} loss {loss.item():.6f}")
say(timer.summary())
say(planner_prediction("engine", world, tp=str(world)))
dist.destroy_process_group()
