"""Chapter 2: nn.DataParallel, one process driving every GPU, and why we do not use it.

Each step it copies the model to every GPU, splits the batch, runs the
replicas in threads of one Python process, and gathers the outputs and the
gradients back on the first GPU. That GPU holds more than the others, the
copies are paid again every step, and one process's GIL drives them all.
Without GPUs it just runs the module, which is why its loss here is
chapter 1's; DDP (chapter 3) keeps one process per device instead.
"""

from common import LR, StepTimer, batches, build_model, loss_of, planner_prediction, say
from torch import nn
from torch.optim import AdamW

model = nn.DataParallel(build_model())  # device_ids: every visible GPU; none here
optimizer = AdamW(model.parameters(), lr=LR)
timer = StepTimer()
for step, (inputs, targets) in enumerate(batches(), 1):
    loss = loss_of(model(inputs), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    timer.lap()
    say(f"step {step} loss {loss.item():.6f}")
say(f"replicas this step: {len(model.device_ids) or 'none (no GPU: the module runs as is)'}")
say(timer.summary())
say(planner_prediction("ddp", 2))
