"""The run behind the check "uneven_pipeline" of tests/parallel_checks.py (4 ranks; tests/test_3d_layouts.py).

A tiny Llama of 10 layers pipelined over 4 stages with the map 2, 3, 3, 2 (1F1B), then over 4 ranks x 2
interleaved chunks with the map 0, 2, 2, 1, 1, 2, 2, 0: the first chunk runs the embedding alone and the last
the head alone, as Llama 3 405B gave them a layer's slot. Then ParallelTrainer runs the same model under
{"pp": 4} over the rows in its sampler's order.

The reference is the same model trained by SGD in one process, built with the same seed on every rank. `uneven_pipeline_run()` returns the loss lists and the layer ranges each rank ran.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import backends
from backends.weights.model_factory import build_causal_lm, catalog_config, tiny_config
from tests.parallel_runs import LR, SEQ_LEN

STAGE_MAP = [2, 3, 3, 2]
INTERLEAVED_MAP = [0, 2, 2, 1, 1, 2, 2, 0]  # chunk c of rank r is stage c * 4 + r


def model():
    return build_causal_lm(tiny_config(catalog_config("llama-3-8b"), layers=10), seed=0, dtype=torch.float32)


def parallel_trainer(data):
    """ParallelTrainer under {"pp": 4}: the rows in DistributedSampler's order of epoch 0, 4 micro-batches of 2
    a step, against the same global batches in one process."""
    rows = torch.cat(data)
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(0))
    reference = model()
    reference.config._attn_implementation = "sdpa"
    optimizer = torch.optim.SGD(reference.parameters(), lr=LR)
    expected = []
    for step in range(len(rows) // 8):
        ids = rows[order[step * 8 : (step + 1) * 8]]
        loss = reference(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        expected.append(float(loss))
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 4,
        "optimizer": {"type": "SGD", "params": {"lr": LR}},
        "hardware_selector": {"layout": {"pp": 4}},
    }
    history = backends.ParallelTrainer(config).train(model(), list(rows), epochs=1)
    return {"trainer_expected": expected, "trainer": [row["loss"] for row in history]}


def uneven_pipeline_run() -> dict:
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
    results = {"expected": expected}
    for name, layout, schedule in (
        ("losses", {"dp": 1, "tp": 1, "pp": 4, "stage_layers": STAGE_MAP}, "1f1b"),
        ("interleaved", {"pp": 4, "virtual_stages": 2, "stage_layers": INTERLEAVED_MAP}, "interleaved-1f1b"),
    ):
        config = {
            "train_micro_batch_size_per_gpu": 2,
            "gradient_accumulation_steps": 4,
            "optimizer": {"type": "SGD", "params": {"lr": LR}},
            "hardware_selector": {"layout": layout, "pipeline_schedule": schedule},
        }
        engine, *_ = backends.initialize(model=model(), config=config)
        results[name] = [float(engine.train_batch(ids)) for ids in data]
        ranges = [None] * 4
        dist.all_gather_object(ranges, engine.parallel_model.chunk_ranges)
        results[f"{name}_ranges"] = ranges
    results.update(parallel_trainer(data))
    return results
