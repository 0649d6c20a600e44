"""torchrun job (4 ranks): a tiny Llama of 10 layers pipelined over 4 stages with the map 2, 3, 3, 2.

The reference is the same model trained in one process (tests/parallel_runs.py's
reference_run, built with the same seed on every rank). Rank 0 writes both loss
lists and the layer ranges each stage ran to argv[1].
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

import backends
from backends.model_factory import build_causal_lm, catalog_config, tiny_config
from tests.parallel_runs import LR, SEQ_LEN

STAGE_MAP = [2, 3, 3, 2]


def model():
    return build_causal_lm(tiny_config(catalog_config("llama-3-8b"), layers=10), seed=0, dtype=torch.float32)


def main():
    dist.init_process_group("gloo")
    data = [torch.randint(0, 512, (8, SEQ_LEN), generator=torch.Generator().manual_seed(step)) for step in range(3)]
    reference = model()
    reference.config._attn_implementation = "sdpa"
    optimizer = torch.optim.SGD(reference.parameters(), lr=LR)
    expected = []
    for ids in data:
        loss = reference(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        expected.append(float(loss))
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 4,
        "optimizer": {"type": "SGD", "params": {"lr": LR}},
        "hardware_selector": {"layout": {"dp": 1, "tp": 1, "pp": 4, "stage_layers": STAGE_MAP}},
    }
    engine, *_ = backends.initialize(model=model(), config=config)
    losses = [float(engine.train_batch(ids)) for ids in data]
    ranges = [None] * 4
    dist.all_gather_object(ranges, engine.parallel_model.chunk_ranges)
    if dist.get_rank() == 0:
        with open(sys.argv[1], "w") as handle:
            json.dump({"losses": losses, "expected": expected, "ranges": ranges}, handle)


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main()
    exit_worker(0)  # gloo's threads can abort interpreter teardown after a run that succeeded
