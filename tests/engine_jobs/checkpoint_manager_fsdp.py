"""torchrun job: CheckpointManager with an FSDP2 model on 2 ranks: each rank saves its own shards.

Trains 4 steps uninterrupted; then trains 2, saves, and a fresh FSDP2 model
and optimizer load the checkpoint and train steps 3-4. Rank 0 writes both
loss lists, and the checkpoint's file list, to argv[2]; argv[1] is the folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from backends.checkpoint.manager import CheckpointManager
from tests.engine_inputs_models import Regressor, dataset


def sharded():
    torch.manual_seed(0)
    model = Regressor()
    for layer in model.net:
        if any(True for _ in layer.parameters()):
            fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=0.05)


def train(model, optimizer, steps, rank, world):
    x, y = dataset().tensors
    losses = []
    for step in steps:
        rows = torch.arange(step * 8, (step + 1) * 8)[rank::world]
        loss = model(x[rows], y[rows]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        average = loss.detach().clone()
        dist.all_reduce(average)
        losses.append(float(average) / world)
    return losses


def main():
    folder, out = Path(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    uninterrupted = train(*sharded(), range(4), rank, world)
    model, optimizer = sharded()
    first = train(model, optimizer, range(2), rank, world)
    manager = CheckpointManager(folder, keep_last=1)
    manager.save(2, model, optimizer)
    model, optimizer = sharded()
    step, _ = CheckpointManager(folder).load(model, optimizer)
    resumed = first + train(model, optimizer, range(step, 4), rank, world)
    if rank == 0:
        files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.distcp"))
        with open(out, "w") as handle:
            json.dump({"uninterrupted": uninterrupted, "resumed": resumed, "step": step, "files": files}, handle)


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main()
    exit_worker(0)  # gloo's threads can abort interpreter teardown after a run that succeeded
