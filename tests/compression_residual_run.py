"""The 2-rank run behind tests/test_compression_plan.py's residual test, in one torchrun job
(`python tests/compression_residual_run.py --out FILE`): the tiny GPT through backends.initialize with int8
gradients under each ZeRO stage, its buckets of the size a plan emits (hidden^2 elements), two optimizer
steps; what the engine then holds: each ZeRO unit's elements and the fp32 residuals of its compressed sums."""

from __future__ import annotations

import torch
import torch.distributed as dist

from tests.parallel_runs import json_job, tiny, tiny_model_config

BATCH, SEQ, STEPS = 4, 16, 2


def held(stage: int) -> dict:
    import backends

    hidden = tiny_model_config("gpt2")["n_embd"]
    config = {
        "train_micro_batch_size_per_gpu": BATCH // dist.get_world_size(),
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": stage, "reduce_bucket_size": hidden * hidden},
        "hardware_selector": {"compression": "int8"},
    }
    engine, *_ = backends.initialize(model=tiny("gpt2"), config=config)
    generator = torch.Generator().manual_seed(3)
    vocab = tiny_model_config("gpt2")["vocab_size"]
    rank, half = dist.get_rank(), BATCH // dist.get_world_size()
    for _ in range(STEPS):
        ids = torch.randint(0, vocab, (BATCH, SEQ), generator=generator)
        engine.train_batch(ids[rank * half : (rank + 1) * half])
    summer = engine.optimizer.compressed_sum
    return {
        "units": [unit.numel for unit in engine.optimizer.units],
        "worker": [summer.worker_residuals[unit.index].numel() for unit in engine.optimizer.units],
        "server": [
            summer.server_residuals[unit.index].numel() if unit.index in summer.server_residuals else 0
            for unit in engine.optimizer.units
        ],
        "dtypes": sorted({str(tensor.dtype) for tensor in summer.worker_residuals.values()}),
    }


def main() -> None:
    json_job(lambda: {f"zero{stage}": held(stage) for stage in (0, 1, 2, 3)})


if __name__ == "__main__":
    main()
