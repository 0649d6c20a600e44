"""Run under torchrun: train tiny models under dp/tp/pp layouts and compare with a single-process reference.

Every rank builds the unsharded reference with the same seed and trains it
on the whole global batch locally; the parallel run must give the same loss
each step, and each rank's parameter shards must equal the matching slices
of the reference parameters. Writes one JSON file: check name -> the largest
loss and parameter differences over all ranks.

    python -m torch.distributed.run --nproc-per-node=2 tests/parallel_checks.py --out r.json tp_gpt2 pp_llama_1f1b
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Callable

import torch
import torch.distributed as dist

from backends.model_factory import build_causal_lm, catalog_config, tiny_config
from backends.parallel_dims import ParallelDims
from backends.parallelize import parallelize
from backends.tensor_parallel.layers import shard_tensor

STEPS, SEQ_LEN, LR = 3, 16, 0.1
MODELS = {"gpt2": "gpt2", "llama": "llama-3-8b", "opt": "opt-125m"}


def tiny(model_key: str):
    return build_causal_lm(tiny_config(catalog_config(MODELS[model_key])), seed=0, dtype=torch.float32)


def batches(global_batch: int, vocab: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1234)
    return [torch.randint(0, vocab, (global_batch, SEQ_LEN), generator=generator) for _ in range(STEPS)]


def reference_run(model_key: str, data: list[torch.Tensor]) -> tuple[list[float], dict[str, torch.Tensor]]:
    model = tiny(model_key)
    model.config._attn_implementation = "sdpa"
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for ids in data:
        optimizer.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, {name: tensor.detach() for name, tensor in model.state_dict().items()}


def local_reference(parallel, reference: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    full = reference[name]
    dim, sections = parallel.shard_specs.get(name, (None, 1))
    if dim is None:
        return full
    return shard_tensor(full, dim, parallel.groups.tp_rank, parallel.dims.tp, sections)


def param_difference(parallel, reference: dict[str, torch.Tensor]) -> float:
    worst = 0.0
    for name, param in parallel.module.named_parameters():
        worst = max(worst, (param.detach() - local_reference(parallel, reference, name)).abs().max().item())
    return worst


def dp_slice(ids: torch.Tensor, parallel) -> torch.Tensor:
    return ids.chunk(parallel.dims.dp)[parallel.groups.dp_rank]


def average_dp_gradients(parallel) -> None:
    from backends.compression import reduce_gradients

    reduce_gradients(list(parallel.parameters()), parallel.groups.dp_group, mode="none")


def layout_run(model_key: str, dims: ParallelDims, *, micro_batches: int = 1, sequence_parallel: bool = False,
               schedule: str = "1f1b", global_batch: int = 4, checkpointing: str = "none",
               sync: Callable | None = None) -> dict[str, float]:
    data = batches(global_batch, tiny_config(catalog_config(MODELS[model_key]))["vocab_size"])
    ref_losses, reference = reference_run(model_key, data)
    parallel = parallelize(tiny(model_key), dims, activation_checkpointing=checkpointing,
                           sequence_parallel=sequence_parallel, pipeline_schedule=schedule)
    parallel.train()
    optimizer = torch.optim.SGD(parallel.parameters(), lr=LR)
    losses = []
    for ids in data:
        optimizer.zero_grad()
        local = dp_slice(ids, parallel)
        loss = parallel.train_batch([(chunk, chunk) for chunk in local.chunk(micro_batches)])
        (sync or average_dp_gradients)(parallel)
        optimizer.step()
        dist.all_reduce(loss, group=parallel.groups.dp_group)
        losses.append(loss.item() / dims.dp)
    return {
        "loss_diff": max(abs(a - b) for a, b in zip(losses, ref_losses)),
        "param_diff": param_difference(parallel, reference),
        "losses": losses,
        "reference_losses": ref_losses,
    }


def two_rank_checks() -> dict[str, Callable[[], dict]]:
    checks: dict[str, Callable[[], dict]] = {}
    for key in ("gpt2", "llama", "opt"):
        checks[f"tp_{key}"] = lambda key=key: layout_run(key, ParallelDims(dp=1, tp=2))
        checks[f"tp_sp_{key}"] = lambda key=key: layout_run(key, ParallelDims(dp=1, tp=2), sequence_parallel=True)
        for schedule in ("gpipe", "1f1b"):
            checks[f"pp_{key}_{schedule}"] = lambda key=key, schedule=schedule: layout_run(
                key, ParallelDims(dp=1, pp=2), micro_batches=4, global_batch=8, schedule=schedule)
    checks["tp_sp_llama_full_checkpointing"] = lambda: layout_run(
        "llama", ParallelDims(dp=1, tp=2), sequence_parallel=True, checkpointing="full")
    checks["tp_gpt2_selective_checkpointing"] = lambda: layout_run(
        "gpt2", ParallelDims(dp=1, tp=2), checkpointing="selective")
    return checks


def four_rank_checks() -> dict[str, Callable[[], dict]]:
    return {
        "dp2_tp2_llama": lambda: layout_run("llama", ParallelDims(dp=2, tp=2), micro_batches=2, global_batch=8,
                                            sequence_parallel=True),
        "dp2_pp2_gpt2": lambda: layout_run("gpt2", ParallelDims(dp=2, pp=2), micro_batches=4, global_batch=8),
    }


CHECK_SETS = {2: two_rank_checks, 4: four_rank_checks}


def run_checks(names: list[str], nproc: int, directory) -> dict[str, dict]:
    """From a test: run the named checks in one torchrun job of nproc ranks; their results by name."""
    from pathlib import Path

    from tests.distributed import run_torchrun

    out = Path(directory) / "results.json"
    run_torchrun(["tests/parallel_checks.py", "--out", str(out), *names], nproc=nproc, timeout=400)
    return json.loads(out.read_text())


def assert_matches_reference(result: dict, tolerance: float = 1e-5) -> None:
    assert result["loss_diff"] < tolerance, result
    assert result["param_diff"] < tolerance, result
    # The run really trained: the reference loss moved between steps.
    assert max(result["reference_losses"]) - min(result["reference_losses"]) > 1e-3, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("checks", nargs="*")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    available = {**two_rank_checks(), **four_rank_checks()}
    names = args.checks or list(CHECK_SETS[dist.get_world_size()]())
    results = {}
    for name in names:
        outcome = available[name]()
        for key in ("loss_diff", "param_diff"):
            value = torch.tensor(outcome[key], dtype=torch.float64)
            dist.all_reduce(value, op=dist.ReduceOp.MAX)
            outcome[key] = value.item()
        results[name] = outcome
    if dist.get_rank() == 0:
        temporary = f"{args.out}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)
        os.replace(temporary, args.out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
