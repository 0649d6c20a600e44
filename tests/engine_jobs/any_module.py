"""torchrun job: a plain nn.Module (no transformer blocks) under ZeRO 0-3, the way a DeepSpeed script runs it.

The script passes a torch AdamW, the training data and a scheduler function
to backends.initialize, as it would to deepspeed.initialize, and iterates the
returned loader. Each rank writes, to argv[1].<rank>.json, its losses per
stage and the final parameters; the test compares them with a single-process
torch loop over the same global batches.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

import backends
from tests.engine_inputs_models import STEPS, Regressor, dataset, global_order, hyperparameters


def run(stage: int) -> tuple[list[float], dict[str, list[float]]]:
    torch.manual_seed(0)
    model = Regressor()
    lr, weight_decay, micro = hyperparameters()
    config = {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage, "allgather_partitions": True, "reduce_bucket_size": 7},
        "wall_clock_breakdown": False,
    }
    engine, _, loader, scheduler = backends.initialize(
        model=model,
        model_parameters=model.parameters(),
        optimizer=torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay),
        training_data=dataset(),
        lr_scheduler=lambda optimizer: torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step)),
        config=config,
    )
    assert loader.sampler.num_replicas == dist.get_world_size()
    loader.sampler.set_epoch(0)
    assert [int(i) for i in loader.sampler] == global_order()[dist.get_rank() :: dist.get_world_size()]
    losses = []
    for step, (x, y) in enumerate(loader):
        if step == STEPS:
            break
        outputs = engine((x, y))  # the model's own output object
        engine.backward(outputs.loss)
        engine.step()
        losses.append(engine.last_loss)
    if stage == 3:
        engine.optimizer.gathered_parameters()  # ZeRO-3 holds a shard; gather the whole tensors to compare
    weights = {name: p.detach().flatten().tolist() for name, p in engine.module.named_parameters()}
    return losses, weights


def main() -> None:
    dist.init_process_group("gloo")
    results = {str(stage): run(stage) for stage in (0, 1, 2, 3)}
    with open(f"{sys.argv[1]}.{dist.get_rank()}.json", "w") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main()
    exit_worker(0)  # gloo's threads can abort interpreter teardown after a run that succeeded
