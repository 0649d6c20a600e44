"""torchrun job: ZeroOptimizer (stage 1, 2 from parameters; 3 from the module) in a hand-written loop.

Each rank trains its rows of the same global batches; rank 0 writes the
losses (averaged over the ranks) and the final weights per case to argv[1].
Each case is saved by a CheckpointManager after step 2 under argv[2]/<case>,
and resumed from there on the same ranks ("<case> resumed").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist

from backends.checkpoint.manager import CheckpointManager
from backends.zero.standalone import ZeroOptimizer
from tests.engine_inputs_models import Regressor, dataset

CASES = {"adamw-1": (torch.optim.AdamW, 1), "adamw-2": (torch.optim.AdamW, 2), "adamw-3": (torch.optim.AdamW, 3),
         "sgd-2": (torch.optim.SGD, 2)}  # fmt: skip
HYPER = {torch.optim.AdamW: {"lr": 0.05, "weight_decay": 0.01}, torch.optim.SGD: {"lr": 0.05, "momentum": 0.9}}


def build(optimizer_cls, stage):
    torch.manual_seed(0)
    model = Regressor()
    zero = ZeroOptimizer(optimizer_cls, model if stage == 3 else model.parameters(), stage=stage, max_grad_norm=1.0,
                         **HYPER[optimizer_cls])  # fmt: skip
    return model, zero


def run(optimizer_cls, stage, rank, world, checkpoints=None, steps=range(4), reduce=True):
    """The losses and final weights; with `checkpoints`, a CheckpointManager save after step 2 (every case's
    own folder), or, for steps that start later, a load of that save first. reduce=False: one process without
    torch.distributed."""
    model, zero = build(optimizer_cls, stage)
    if checkpoints is not None and steps[0] > 0:
        assert CheckpointManager(checkpoints).load(model, zero) == (steps[0], {"samples": 8 * steps[0]})
    x, y = dataset().tensors
    losses = []
    for step in steps:
        rows = slice(step * 8, (step + 1) * 8)
        mine = torch.arange(rows.start, rows.stop)[rank::world]
        first, second = mine.chunk(2)  # two accumulated micro-batches
        total = 0.0
        for part, last in ((first, False), (second, True)):
            loss = model(x[part], y[part]).loss / 2
            # The last micro-batch hands over a whole output, as an HF model returns it (engine.backward takes
            # either; ZeroOptimizer.backward raised AttributeError on one, an audit).
            zero.backward(SimpleNamespace(loss=loss) if last else loss, accumulate=not last)
            total += float(loss.detach())
        zero.step()
        average = torch.tensor([total])
        if reduce:
            dist.all_reduce(average)
        losses.append(float(average) / world)
        if checkpoints is not None and steps[0] == 0 and step == 1:
            CheckpointManager(checkpoints).save(step + 1, model, zero, extra={"samples": 8 * (step + 1)})
    zero.gathered_parameters()
    return losses, [p.detach().flatten().tolist() for p in model.parameters()]


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    saved = Path(sys.argv[2])
    results = {name: run(cls, stage, rank, world, saved / name) for name, (cls, stage) in CASES.items()}
    # The same world size resumes each case from its step-2 checkpoint (the test resumes it on one process).
    for name, (cls, stage) in CASES.items():
        results[f"{name} resumed"] = run(cls, stage, rank, world, saved / name, steps=range(2, 4))
    if rank == 0:
        with open(sys.argv[1], "w") as handle:
            json.dump(results, handle)


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main()
    exit_worker(0)  # gloo's threads can abort interpreter teardown after a run that succeeded
