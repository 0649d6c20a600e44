"""Chapter 5: pipeline parallelism: chapter 4's two stages, fed micro-batches so both work at once.

Run with `torchrun --nproc_per_node=2 05_pipeline.py [gpipe|1f1b]`. The
global batch is cut into 4 micro-batches. GPipe runs every forward, then
every backward: the bubble is (stages - 1) / (micro-batches + stages - 1) of
the time, and every micro-batch's activations are alive at once. 1F1B
starts each backward as soon as it can, so a stage holds at most `stages`
micro-batches' activations; the bubble is the same. torch's
torch.distributed.pipelining runs both schedules.
"""

import sys

import torch.distributed as dist
from common import LAYERS, LR, StepTimer, batches, build_model, loss_of, planner_prediction, say
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.optim import AdamW

MICRO_BATCHES = 4
schedule_class = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[sys.argv[1] if len(sys.argv) > 1 else "1f1b"]

dist.init_process_group("gloo")
rank, stages = dist.get_rank(), dist.get_world_size()
model = build_model()
half = LAYERS // 2
part = (
    nn.Sequential(model.embed, *model.blocks[:half]) if rank == 0 else nn.Sequential(*model.blocks[half:], model.head)
)
stage = PipelineStage(part, stage_index=rank, num_stages=stages, device="cpu")


def micro_batch_loss(logits, targets):
    return loss_of(logits, targets) / MICRO_BATCHES  # the micro-batches' gradients add up to the batch mean's


schedule = schedule_class(stage, n_microbatches=MICRO_BATCHES, loss_fn=micro_batch_loss)
optimizer = AdamW(part.parameters(), lr=LR)
timer = StepTimer()
for step, (inputs, targets) in enumerate(batches(), 1):
    losses: list = []
    if rank == 0:
        schedule.step(inputs)
    else:
        schedule.step(target=targets, losses=losses)
    optimizer.step()
    optimizer.zero_grad()
    timer.lap()
    if rank == stages - 1:  # the last stage has the loss
        print(f"step {step} loss {sum(loss.item() for loss in losses):.6f}", flush=True)
    dist.barrier()
say(timer.summary())
say(
    planner_prediction(
        "engine",
        2,
        pp="2",
        grad_accum=str(MICRO_BATCHES),
        pp_schedule=schedule_class.__name__.removeprefix("Schedule").lower(),
    )
)
dist.destroy_process_group()
