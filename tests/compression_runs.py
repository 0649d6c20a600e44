"""The 2-rank runs behind tests/test_compressed_sum.py, in one torchrun job (`python tests/compression_runs.py
--out FILE`): the compressed sums against the exact ones, the bytes they hand to the collectives, and the
tiny GPT trained for 200 steps under each compression mode (and 1-bit Adam with its momenta averaged exactly)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from backends.parts.compressed_sum import CompressedSum
from tests.parallel_runs import json_job, tiny, tiny_model_config

TRAIN_STEPS, BATCH, SEQ, LR = 200, 8, 16, 1e-3
WARMUP = {"none": 0, "int8": 0, "onebit": 40}  # 1-bit Adam's freeze_step: plain Adam, gradients summed exactly


def sums() -> dict:
    """For each mode: the largest error of one reduce-scatter and all-reduce against the exact sum (in units
    of the exact sum's largest magnitude), the drift of 50 error-fed all-reduces summed (against 50 exact
    ones, same units), and the bytes sent per element as a ring all-reduce counts them (fp32's: 4)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    elements = 4096
    results = {}
    for mode in ("int8", "onebit"):
        summer = CompressedSum(mode)
        generator = torch.Generator().manual_seed(100 + rank)
        contributions = [torch.randn(elements, generator=generator) for _ in range(50)]
        exact = [_exact_sum(c) for c in contributions]
        peak = max(float(e.abs().max()) for e in exact)
        chunk = elements // world
        scattered = summer.reduce_scatter("first", contributions[0])
        one_scatter = float((scattered - exact[0][rank * chunk : (rank + 1) * chunk]).abs().max()) / peak
        before = summer.wire_bytes
        reduced = [summer.all_reduce("fed", c) for c in contributions]
        ring = 2 * (world - 1) / world  # an all-reduce's elements sent per element (a ring's)
        per_element = (summer.wire_bytes - before) / 50 / elements / ring
        one_reduce = float((reduced[0] - exact[0]).abs().max()) / peak
        drift = float((sum(reduced) - sum(exact)).abs().max()) / peak
        # The same sums with no feedback: each call its own key, so no residual is ever carried over.
        unfed = [summer.all_reduce(("unfed", step), c) for step, c in enumerate(contributions)]
        drift_unfed = float((sum(unfed) - sum(exact)).abs().max()) / peak
        results[mode] = {
            "reduce_scatter_error": one_scatter,
            "all_reduce_error": one_reduce,
            "drift_after_50": drift,
            "drift_after_50_without_feedback": drift_unfed,
            "bytes_per_element": per_element,
            "same_on_every_rank": _same_everywhere(reduced[-1]),
        }
    return results


def _exact_sum(tensor: torch.Tensor) -> torch.Tensor:
    total = tensor.clone()
    dist.all_reduce(total)
    return total


def _same_everywhere(tensor: torch.Tensor) -> bool:
    gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, tensor)
    return all(torch.equal(gathered[0], other) for other in gathered)


def counting_batches(vocab: int) -> list[torch.Tensor]:
    """Learnable text: each sequence counts up from a random start, so the loss can fall far below log(vocab)."""
    generator = torch.Generator().manual_seed(7)
    starts = torch.randint(0, vocab, (TRAIN_STEPS, BATCH, 1), generator=generator)
    return [(start + torch.arange(SEQ)) % vocab for start in starts]


def _exact_mean(key: object, momentum: torch.Tensor) -> torch.Tensor:
    return _exact_sum(momentum) / dist.get_world_size()


def training(stage: int, mode: str, exact_momentum: bool = False) -> dict:
    """The tiny GPT on dp2 through backends.initialize, Adam, `mode` on its gradient reductions (onebit: 1-bit
    Adam; exact_momentum: the same with its momenta averaged exactly, what the compression alone costs)."""
    import backends

    config = {
        "train_micro_batch_size_per_gpu": BATCH // dist.get_world_size(),
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "Adam", "params": {"lr": LR}},
        # A few buckets a step (0.25M parameters): the 1-bit runs' blocks follow them; five times as many small
        # ones doubled the job's CPU time (docs/parallelism.md).
        "zero_optimization": {"stage": stage, "reduce_bucket_size": 100_000},
        "hardware_selector": {"compression": mode, "compression_warmup_steps": WARMUP[mode]},
    }
    engine, *_ = backends.initialize(model=tiny("gpt2"), config=config)
    if exact_momentum:
        engine.optimizer.onebit_adam.average = _exact_mean
    rank, half = dist.get_rank(), BATCH // dist.get_world_size()
    losses, norms = [], []
    for ids in counting_batches(tiny_model_config("gpt2")["vocab_size"]):
        losses.append(float(engine.train_batch(ids[rank * half : (rank + 1) * half])))
        norms.append(engine.optimizer.last_grad_norm)
    summer = engine.optimizer.compressed_sum
    return {
        "losses": losses,
        "wire_bytes": summer.wire_bytes if summer is not None else None,
        "elements": engine.optimizer.master.numel(),  # what each compressed step sums (ZeRO-0: the whole model)
        "compressed_steps": TRAIN_STEPS - WARMUP[mode],
        # 1-bit Adam's ranks keep their own gradients: the norm they clip by must still agree (grad_norm.py)
        "norms_same_on_every_rank": _same_everywhere(torch.tensor(norms)),
    }


def collect() -> dict:
    results = {"sums": sums()}
    # int8 on ZeRO-1's reduce-scatter (the first phase alone); onebit, 1-bit Adam, on ZeRO-0 (the only stage it
    # runs on): its momentum's all-reduce (both phases).
    for stage, mode in ((1, "none"), (1, "int8"), (0, "onebit")):
        results[f"zero{stage}_{mode}"] = training(stage, mode)
    results["zero0_onebit_exact_momentum"] = training(0, "onebit", exact_momentum=True)
    return results


def main() -> None:
    json_job(collect)


if __name__ == "__main__":
    main()
