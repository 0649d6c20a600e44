"""Run under torchrun: train tiny models under dp/tp/pp layouts and compare with a single-process reference.

Every rank builds the unsharded reference with the same seed and trains it
on the whole global batch locally; the parallel run must give the same loss
each step, and each rank's parameter shards must equal the matching slices
of the reference parameters (the runs live in tests/parallel_runs.py). Writes
one JSON file: check name -> the largest loss and parameter differences over
all ranks.

    python -m torch.distributed.run --nproc-per-node=2 tests/parallel_checks.py --out r.json tp_gpt2 pp_llama_1f1b
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable

import torch
import torch.distributed as dist

from backends.parallel_dims import ParallelDims
from tests.parallel_runs import (
    compression_run,
    engine_fp16_overflow_run,
    engine_reshard_run,
    engine_resume_run,
    engine_run,
    layout_run,
    reshard_run,
)
from tests.uneven_pipeline_run import uneven_pipeline_run

OUT_PATH: list[str] = []  # the --out file; checks that write files use its folder


def scratch(*name: str) -> str:
    """A path beside the --out file (checkpoints and exports of the checks)."""
    return os.path.join(os.path.dirname(os.path.abspath(OUT_PATH[0])), *name)


def two_rank_checks() -> dict[str, Callable[[], dict]]:
    checks: dict[str, Callable[[], dict]] = {}
    for key in ("gpt2", "llama", "opt"):
        checks[f"tp_{key}"] = lambda key=key: layout_run(key, ParallelDims(dp=1, tp=2))
        checks[f"tp_sp_{key}"] = lambda key=key: layout_run(key, ParallelDims(dp=1, tp=2), sequence_parallel=True)
        for schedule in ("gpipe", "1f1b"):
            checks[f"pp_{key}_{schedule}"] = lambda key=key, schedule=schedule: layout_run(
                key, ParallelDims(dp=1, pp=2), micro_batches=4, global_batch=8, schedule=schedule
            )
    # Clipping by the global norm: TP-replicated parameters and the tied embedding of two stages count once
    # (and ZeRO-0 under interleaved pp2 with the plan's virtual_stages).
    checks["engine_clip_tp2_llama"] = lambda: engine_run(
        "llama", ParallelDims(dp=1, tp=2), zero_stage=1, micro_batches=1, global_batch=4, clip=0.05
    )
    checks["engine_clip_pp2_gpt2_interleaved"] = lambda: engine_run(
        "gpt2",
        ParallelDims(dp=1, pp=2),
        zero_stage=0,
        micro_batches=4,
        global_batch=8,
        clip=0.05,
        schedule="interleaved-1f1b",
        virtual_stages=2,
    )
    checks["engine_fp16_overflow_tp2_llama"] = engine_fp16_overflow_run
    # Resume in the same layout; engine_state.json keeps each stage's ZeRO units, loss scaler and scheduler.
    for name, dims, layout in (
        ("tp2", ParallelDims(dp=1, tp=2), {"sequence_parallel": True}),
        ("pp2", ParallelDims(dp=1, pp=2), {"pipeline_schedule": "1f1b", "fp16": True}),
    ):
        checks[f"engine_resume_{name}"] = lambda name=name, dims=dims, layout=layout: engine_resume_run(
            "gpt2", dims, scratch(f"ckpt_{name}"), **layout
        )
    # The exported file equals the reference weights: tied GPT-2 across two stages, Llama (GQA) under tp.
    checks["engine_export_pp2_gpt2"] = lambda: engine_run(
        "gpt2",
        ParallelDims(dp=1, pp=2),
        zero_stage=1,
        micro_batches=2,
        global_batch=4,
        export_dir=scratch("export_pp2"),
    )
    checks["engine_export_tp2_llama"] = lambda: engine_run(
        "llama",
        ParallelDims(dp=1, tp=2),
        zero_stage=2,
        micro_batches=2,
        global_batch=4,
        sequence_parallel=True,
        export_dir=scratch("export_tp2"),
    )
    # Resume under another layout: tp2 -> pp2 with a padded, tied vocabulary; pp2 -> tp2 + SP with replicated KV heads.
    checks["engine_reshard_tp2_to_pp2_gpt2_odd_vocab"] = lambda: engine_reshard_run(
        "gpt2_odd_vocab", ParallelDims(dp=1, tp=2), ParallelDims(dp=1, pp=2), scratch("ckpt_reshard_tp2")
    )
    checks["engine_reshard_pp2_to_tp2_llama_one_kv_head"] = lambda: engine_reshard_run(
        "llama_one_kv_head",
        ParallelDims(dp=1, pp=2),
        ParallelDims(dp=1, tp=2),
        scratch("ckpt_reshard_pp2"),
        sequence_parallel=True,
    )
    checks["tp_sp_gpt2_odd_vocab"] = lambda: layout_run(
        "gpt2_odd_vocab", ParallelDims(dp=1, tp=2), sequence_parallel=True
    )
    checks["tp_sp_llama_one_kv_head"] = lambda: layout_run(
        "llama_one_kv_head", ParallelDims(dp=1, tp=2), sequence_parallel=True
    )
    checks["pp_llama_interleaved"] = lambda: layout_run(
        "llama", ParallelDims(dp=1, pp=2), micro_batches=4, global_batch=8, schedule="interleaved-1f1b"
    )
    for key in ("qwen2", "mistral", "qwen3"):  # q/k/v biases (Qwen2); Mistral's own classes; QK-norm (Qwen3)
        checks[f"tp_sp_{key}"] = lambda key=key: layout_run(key, ParallelDims(dp=1, tp=2), sequence_parallel=True)
    checks["tp_sp_llama_full_checkpointing"] = lambda: layout_run(
        "llama", ParallelDims(dp=1, tp=2), sequence_parallel=True, checkpointing="full"
    )
    checks["tp_sp_llama_op_checkpointing"] = lambda: layout_run(
        "llama", ParallelDims(dp=1, tp=2), sequence_parallel=True, checkpointing="op"
    )
    checks["pp_gpt2_1f1b_op_checkpointing"] = lambda: layout_run(
        "gpt2", ParallelDims(dp=1, pp=2), micro_batches=4, global_batch=8, schedule="1f1b", checkpointing="op"
    )
    checks["tp_gpt2_selective_checkpointing"] = lambda: layout_run(
        "gpt2", ParallelDims(dp=1, tp=2), checkpointing="selective"
    )
    checks["reshard_tp2_to_pp2"] = lambda: reshard_run(scratch())
    for mode in ("bf16", "int8"):
        checks[f"compression_{mode}"] = lambda mode=mode: compression_run(mode)
    checks["compression_none"] = lambda: compression_run("none")
    return checks


def four_rank_checks() -> dict[str, Callable[[], dict]]:
    return {
        # ZeRO-1 shards (DTensors on each stage's dp group) and every stage's state, resumed in the same layout.
        "engine_resume_dp2_pp2": lambda: engine_resume_run(
            "gpt2", ParallelDims(dp=2, pp=2), scratch("ckpt_dp2_pp2"), fp16=True
        ),
        "engine_zero1_dp2_tp2_llama": lambda: engine_run(
            "llama", ParallelDims(dp=2, tp=2), zero_stage=1, micro_batches=2, global_batch=8, sequence_parallel=True
        ),
        "engine_zero1_dp2_pp2_gpt2": lambda: engine_run(
            "gpt2", ParallelDims(dp=2, pp=2), zero_stage=1, micro_batches=4, global_batch=8
        ),
        "dp2_tp2_llama_one_kv_head": lambda: layout_run(
            "llama_one_kv_head", ParallelDims(dp=2, tp=2), global_batch=8, micro_batches=2
        ),
        "tp2_pp2_sp_gpt2_interleaved": lambda: layout_run(
            "gpt2",
            ParallelDims(dp=1, tp=2, pp=2),
            micro_batches=4,
            global_batch=8,
            sequence_parallel=True,
            schedule="interleaved-1f1b",
            checkpointing="full",
        ),
        "engine_zero2_dp2_pp2_gpt2": lambda: engine_run(
            "gpt2", ParallelDims(dp=2, pp=2), zero_stage=2, micro_batches=4, global_batch=8
        ),
        "engine_zero3_dp2_tp2_llama": lambda: engine_run(
            "llama", ParallelDims(dp=2, tp=2), zero_stage=3, micro_batches=2, global_batch=8
        ),
        # pp 4 over a 10-layer Llama: the uneven map 2, 3, 3, 2; interleaved chunks with the embedding and the
        # head alone; ParallelTrainer. Its own reference and losses (tests/uneven_pipeline_run.py).
        "uneven_pipeline": uneven_pipeline_run,
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
    # The global gradient norm (for clipping) counts replicated and tied parameters once.
    assert result.get("grad_norm_diff", 0.0) < tolerance, result
    assert result.get("grad_norm_rel_diff", 0.0) < tolerance, result  # the engine's, used for clipping
    # The run really trained: the reference loss moved between steps.
    assert max(result["reference_losses"]) - min(result["reference_losses"]) > 1e-3, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("checks", nargs="*")
    args = parser.parse_args()
    OUT_PATH.append(args.out)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    available = {**two_rank_checks(), **four_rank_checks()}
    names = args.checks or list(CHECK_SETS[dist.get_world_size()]())
    results = {}
    for name in names:
        outcome = available[name]()
        for key in sorted(key for key in outcome if key.endswith("_diff")):
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
    from backends.distributed_init import exit_worker

    main()
    exit_worker(0)
