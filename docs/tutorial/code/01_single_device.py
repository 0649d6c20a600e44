"""Chapter 1: train on one device. Every later chapter must reproduce these losses."""

from common import LR, StepTimer, batches, build_model, loss_of, planner_prediction, say
from torch.optim import AdamW

model = build_model()
optimizer = AdamW(model.parameters(), lr=LR)
timer = StepTimer()
for step, (inputs, targets) in enumerate(batches(), 1):
    loss = loss_of(model(inputs), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    timer.lap()
    say(f"step {step} loss {loss.item():.6f}")
say(timer.summary())
say(planner_prediction("ddp", 1))
