"""torchrun job (2 ranks): a seed library's `initialize(model=..., config=..., pipeline=True)` as its user writes it,
and the reference, the same run written in our vocabulary (hardware_selector.layout {"pp": 2}).

Rank 0 writes both runs' losses, pipeline stage counts and what initialize printed to argv[1].
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

import torch.distributed as dist

import backends
from backends.weights.model_factory import build_causal_lm
from tests.engine_jobs.common import global_batches, tiny_gpt2

SEED_CONFIG = {"batch_size": 2, "zero_stage": 1, "gradient_accumulation_steps": 2}
OURS = {
    "train_micro_batch_size_per_gpu": 2,
    "zero_optimization": {"stage": 1},
    "gradient_accumulation_steps": 2,
    "hardware_selector": {"layout": {"pp": 2}},
}


def run(config: dict, **pipeline: bool) -> tuple[list[float], int, str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        engine, *_ = backends.initialize(model=build_causal_lm(tiny_gpt2(), seed=0), config=config, **pipeline)
    losses = [float(engine.train_batch(batch)) for batch in global_batches(3, 4)]
    return losses, engine.parallel_model.dims.pp, printed.getvalue()


def main() -> None:
    dist.init_process_group("gloo")
    seed_losses, seed_stages, seed_printed = run(SEED_CONFIG, pipeline=True)
    ours_losses, ours_stages, ours_printed = run(OURS)
    if dist.get_rank() == 0:
        with open(sys.argv[1], "w") as handle:
            json.dump(
                {
                    "seed": {"losses": seed_losses, "pp": seed_stages, "printed": seed_printed},
                    "ours": {"losses": ours_losses, "pp": ours_stages, "printed": ours_printed},
                },
                handle,
            )


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main()
    exit_worker(0)  # gloo's threads can abort interpreter teardown after a run that succeeded
