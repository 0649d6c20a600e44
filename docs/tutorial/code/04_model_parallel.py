"""Chapter 4: model parallelism by hand: the first half of the layers on rank 0, the second on rank 1.

Run with `torchrun --nproc_per_node=2 04_model_parallel.py`. Rank 0 runs
the embeddings and the first blocks and sends its activations to rank 1,
which runs the rest, computes the loss, and sends back the gradient of the
activations it received, so rank 0 can finish backward. Each rank holds and
updates only its half: the model's memory is split, but one rank always
waits for the other (chapter 5 fills that idle time).
"""

import torch
import torch.distributed as dist
from common import LAYERS, LR, SEQ, WIDTH, StepTimer, batches, build_model, loss_of, planner_prediction, say
from torch import nn
from torch.optim import AdamW

dist.init_process_group("gloo")
rank = dist.get_rank()
model = build_model()
half = LAYERS // 2
if rank == 0:
    part = nn.Sequential(model.embed, *model.blocks[:half])
else:
    part = nn.Sequential(*model.blocks[half:], model.head)
optimizer = AdamW(part.parameters(), lr=LR)
timer = StepTimer()
for step, (inputs, targets) in enumerate(batches(), 1):
    if rank == 0:
        hidden = part(inputs)
        dist.send(hidden.detach(), dst=1)  # activations forward
        grad = torch.empty_like(hidden)
        dist.recv(grad, src=1)  # their gradient back
        hidden.backward(grad)
        loss = torch.empty(())
        dist.recv(loss, src=1)
    else:
        hidden = torch.empty(len(inputs), SEQ, WIDTH)
        dist.recv(hidden, src=0)
        hidden.requires_grad_(True)
        loss = loss_of(part(hidden), targets)
        loss.backward()
        dist.send(hidden.grad, dst=0)
        dist.send(loss.detach(), dst=0)
    optimizer.step()
    optimizer.zero_grad()
    timer.lap()
    say(f"step {step} loss {loss.item():.6f}")
say(timer.summary())
say(planner_prediction("engine", 2, pp="2", grad_accum="4"))  # the planner pipelines micro-batches: chapter 5
dist.destroy_process_group()
