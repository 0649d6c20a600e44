"""The runs behind tests/parallel_checks.py: tiny models trained under a dp/tp/pp layout beside an
unsharded single-process reference built with the same seed on every rank.

Each run returns its largest loss and parameter differences from the reference
(keys ending in "_diff"), plus what the test asserts on; parallel_checks.py
names them, runs them in one torchrun job and reduces the differences over ranks.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
import torch.distributed as dist

from backends.checkpoint.parallel_weights import load_consolidated, local_slice, save_consolidated
from backends.model_parallel.split import split_model
from backends.parallel_dims import ParallelDims
from backends.weights.model_factory import build_causal_lm, catalog_config, tiny_config
from planner.errors import UserInputError

STEPS, SEQ_LEN, LR = 3, 16, 0.1
REFERENCE_GRAD_NORMS: list[float] = []  # of the latest reference_run, per step
MODELS = {
    "gpt2": "gpt2",
    "llama": "llama-3-8b",
    "opt": "opt-125m",
    "qwen2": "qwen2.5-0.5b",
    "mistral": "mistral-7b",
    "qwen3": "qwen3-8b",
}


def tiny_model_config(model_key: str) -> dict:
    if model_key == "gpt2_odd_vocab":  # GPT-2's real vocabulary (50257) is odd: tp pads it
        return tiny_config(catalog_config("gpt2"), vocab_size=509)
    if model_key == "llama_one_kv_head":  # fewer key/value heads than tp: each rank holds a replica
        return {**tiny_config(catalog_config("llama-3-8b")), "num_key_value_heads": 1}
    return tiny_config(catalog_config(MODELS[model_key]))


def tiny(model_key: str):
    return build_causal_lm(tiny_model_config(model_key), seed=0, dtype=torch.float32)


def batches(global_batch: int, vocab: int, steps: int = STEPS) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1234)
    return [torch.randint(0, vocab, (global_batch, SEQ_LEN), generator=generator) for _ in range(steps)]


def reference_run(
    model_key: str, data: list[torch.Tensor], clip: float = 0.0
) -> tuple[list[float], dict[str, torch.Tensor]]:
    model = tiny(model_key)
    model.config._attn_implementation = "sdpa"
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses, norms = [], []
    for ids in data:
        optimizer.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        norms.append(float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])))
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
    REFERENCE_GRAD_NORMS[:] = norms
    return losses, {name: tensor.detach() for name, tensor in model.state_dict().items()}


def local_reference(parallel, reference: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    return local_slice(parallel, name, reference[name])


def param_difference(parallel, reference: dict[str, torch.Tensor]) -> float:
    worst = 0.0
    for name, param in parallel.module.named_parameters():
        worst = max(worst, (param.detach() - local_reference(parallel, reference, name)).abs().max().item())
    return worst


def dp_slice(ids: torch.Tensor, parallel) -> torch.Tensor:
    if parallel is None:  # data parallel only: every rank is a dp rank
        return ids.chunk(dist.get_world_size())[dist.get_rank()]
    return ids.chunk(parallel.dims.dp)[parallel.groups.dp_rank]


def unsharded_param_difference(model, reference: dict[str, torch.Tensor]) -> float:
    return max((param.detach() - reference[name]).abs().max().item() for name, param in model.named_parameters())


def average_dp_gradients(parallel) -> None:
    from backends.parts.compression import reduce_gradients

    reduce_gradients(list(parallel.parameters()), parallel.groups.dp_group, mode="none")


def layout_run(
    model_key: str,
    dims: ParallelDims,
    *,
    micro_batches: int = 1,
    sequence_parallel: bool = False,
    schedule: str = "1f1b",
    global_batch: int = 4,
    checkpointing: str = "none",
    steps: int = STEPS,
    first_step: int = 0,
    load_from: str | None = None,
    save_to: str | None = None,
    sync: Callable | None = None,
) -> dict[str, float]:
    """Train steps [first_step, steps) under the layout (after loading `load_from`) against the reference."""
    data = batches(global_batch, tiny_model_config(model_key)["vocab_size"], steps)
    ref_losses, reference = reference_run(model_key, data)
    parallel = split_model(
        tiny(model_key),
        dims,
        activation_checkpointing=checkpointing,
        sequence_parallel=sequence_parallel,
        pipeline_schedule=schedule,
    )
    if load_from:
        load_consolidated(parallel, load_from)
    parallel.train()
    optimizer = torch.optim.SGD(parallel.parameters(), lr=LR)
    losses, norms = [], []
    for ids in data[first_step:]:
        optimizer.zero_grad()
        local = dp_slice(ids, parallel)
        loss = parallel.train_batch([(chunk, chunk) for chunk in local.chunk(micro_batches)])
        (sync or average_dp_gradients)(parallel)
        norms.append(parallel.global_grad_norm())
        optimizer.step()
        dist.all_reduce(loss, group=parallel.groups.dp_group)
        losses.append(loss.item() / dims.dp)
    if save_to:
        save_consolidated(parallel, save_to)
    return {
        "loss_diff": max(abs(a - b) for a, b in zip(losses, ref_losses[first_step:])),
        "param_diff": param_difference(parallel, reference),
        "grad_norm_diff": max(abs(a - b) for a, b in zip(norms, REFERENCE_GRAD_NORMS[first_step:])),
        "losses": losses,
        "reference_losses": ref_losses,
    }


def reshard_run(directory: str) -> dict:
    """Train 3 steps under tp2 (tied GPT-2), save consolidated, continue 2 steps under pp2 from the file."""
    path = os.path.join(directory, "tp2.safetensors")
    layout_run("gpt2", ParallelDims(dp=1, tp=2), steps=STEPS, save_to=path)
    result = layout_run(
        "gpt2", ParallelDims(dp=1, pp=2), micro_batches=2, steps=STEPS + 2, first_step=STEPS, load_from=path
    )
    try:
        wrong = split_model(tiny("llama"), ParallelDims(dp=1, pp=2))
        load_consolidated(wrong, path)
        result["wrong_model_error"] = None
    except UserInputError as error:
        result["wrong_model_error"] = str(error)
    return result


def compression_run(mode: str, steps: int = 6) -> dict:
    """dp2 through backends.initialize with engine.json's compression key (ZeRO-2, reduce-scatter in
    backward), against fp32 single-process training."""
    return engine_run(
        "llama", ParallelDims(dp=2), zero_stage=2, micro_batches=1, global_batch=4, steps=steps, compression=mode
    )


def engine_run(
    model_key: str,
    dims: ParallelDims,
    *,
    zero_stage: int,
    micro_batches: int,
    global_batch: int,
    sequence_parallel: bool = False,
    schedule: str = "1f1b",
    virtual_stages: int | None = None,
    clip: float = 0.0,
    compression: str = "none",
    steps: int = STEPS,
    export_dir: str | None = None,
) -> dict:
    """The same comparison through backends.initialize: our ZeRO on the dp group of the layout (and, with
    export_dir, engine.export_consolidated compared with the reference weights after loading it into HF)."""
    import backends

    data = batches(global_batch, tiny_model_config(model_key)["vocab_size"], steps)
    ref_losses, reference = reference_run(model_key, data, clip)
    ref_norms = list(REFERENCE_GRAD_NORMS)
    config = {
        "gradient_clipping": clip,
        "train_micro_batch_size_per_gpu": global_batch // dims.dp // micro_batches,
        "gradient_accumulation_steps": micro_batches,
        "optimizer": {"type": "SGD", "params": {"lr": LR}},
        "zero_optimization": {"stage": zero_stage, "reduce_bucket_size": 5000},
        "hardware_selector": {
            "compression": compression,
            **layout_block(
                dims, sequence_parallel=sequence_parallel, pipeline_schedule=schedule, virtual_stages=virtual_stages
            ),
        },
    }
    engine, *_ = backends.initialize(model=tiny(model_key), config=config)
    parallel = engine.parallel_model
    if virtual_stages:
        assert len(parallel.chunk_ranges) == virtual_stages, parallel.chunk_ranges
    losses, norms = [], []  # the engine's global gradient norm (before clipping) of each step
    for ids in data:
        losses.append(float(engine.train_batch(dp_slice(ids, parallel))))
        norms.append(engine.optimizer.last_grad_norm)
    gather = getattr(engine.optimizer, "gathered_parameters", None)  # ZeRO-3 frees parameters between uses
    if gather:
        gather()
    param_diff = (
        param_difference(parallel, reference) if parallel else unsharded_param_difference(engine.module, reference)
    )
    if gather:
        engine.optimizer.release_parameters()
    result = {
        "loss_diff": max(abs(a - b) for a, b in zip(losses, ref_losses)),
        "param_diff": param_diff,
        "grad_norm_rel_diff": max(abs(a - b) / b for a, b in zip(norms, ref_norms)),
        "losses": losses,
        "reference_losses": ref_losses,
        "reference_grad_norms": ref_norms,
    }
    if export_dir:
        result.update(exported_vs_reference(engine, export_dir, reference))
    return result


def exported_vs_reference(engine, directory: str, reference: dict[str, torch.Tensor]) -> dict:
    """Export, load the file with HF's from_pretrained, and compare every tensor with the reference's."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    if dist.get_rank() == 0:
        engine.parallel_model.module.config.save_pretrained(directory)
    engine.export_consolidated(os.path.join(directory, "model.safetensors"))
    with safe_open(os.path.join(directory, "model.safetensors"), framework="pt") as handle:
        keys = sorted(handle.keys())
    loaded = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).state_dict()
    return {
        "export_diff": max((loaded[name] - tensor).abs().max().item() for name, tensor in reference.items()),
        "exported_keys": keys,
        "reference_keys": sorted(reference),
    }


def layout_block(
    dims: ParallelDims,
    *,
    sequence_parallel: bool = False,
    pipeline_schedule: str = "1f1b",
    virtual_stages: int | None = None,
) -> dict:
    """engine.json's hardware_selector layout keys: the ParallelDims, the schedule and sequence parallelism."""
    chunks = virtual_stages or (2 if pipeline_schedule == "interleaved-1f1b" and dims.pp > 1 else 1)
    return {
        "layout": dims.model_copy(update={"virtual_stages": chunks}).model_dump(mode="json"),
        "sequence_parallel": sequence_parallel,
        "pipeline_schedule": pipeline_schedule,
    }


def resume_config(dims: ParallelDims, *, fp16: bool = False, **layout: object) -> dict:
    return {
        "train_micro_batch_size_per_gpu": 4 // dims.dp // 2,
        "gradient_accumulation_steps": 2,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 1},
        "scheduler": {
            "type": "WarmupLR",
            "params": {"warmup_min_lr": 5e-4, "warmup_max_lr": 1e-3, "warmup_num_steps": 4},
        },
        # The scale doubles after every clean step, so a scaler that is not restored shows.
        "fp16": {"enabled": fp16, "initial_scale_power": 4, "loss_scale_window": 1},
        "hardware_selector": layout_block(dims, **layout),  # type: ignore[arg-type]
    }


def engine_reshard_run(
    model_key: str, saved: ParallelDims, resumed: ParallelDims, directory: str, **layout: object
) -> dict:
    """An engine checkpoint saved after step 2 under one tp/pp layout resumes under another: step 3's loss and the
    full weights after it must equal the uninterrupted run's (AdamW states, WarmupLR, tied and padded tensors)."""
    import backends
    from backends.checkpoint.export import consolidated_state_dict

    data = batches(4, tiny_model_config(model_key)["vocab_size"])
    first, *_ = backends.initialize(model=tiny(model_key), config=resume_config(saved))
    losses = [float(first.train_batch(dp_slice(ids, first.parallel_model))) for ids in data[:2]]
    first.save_checkpoint(directory)
    losses.append(float(first.train_batch(dp_slice(data[2], first.parallel_model))))
    second, *_ = backends.initialize(model=tiny(model_key), config=resume_config(resumed, **layout))
    second.load_checkpoint(directory)
    loss = float(second.train_batch(dp_slice(data[2], second.parallel_model)))
    uninterrupted, continued = consolidated_state_dict(first), consolidated_state_dict(second)
    return {
        "loss_diff": abs(loss - losses[2]),
        "losses": losses,
        "resumed": loss,
        "reference_losses": losses,
        "param_diff": max((uninterrupted[name] - continued[name]).abs().max().item() for name in uninterrupted),
        "lr_diff": abs(first.optimizer.param_groups[0]["lr"] - second.optimizer.param_groups[0]["lr"]),
    }


def engine_fp16_overflow_run() -> dict:
    """fp16 under tp2: only tp rank 1 gets an inf gradient, on step 2 of 3; every rank must skip that step."""
    import backends

    config = {
        "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "SGD", "params": {"lr": LR}},
        "zero_optimization": {"stage": 1},
        "fp16": {"enabled": True, "initial_scale_power": 8, "hysteresis": 1},
        "hardware_selector": {"layout": {"dp": 1, "tp": 2}},
    }
    engine, *_ = backends.initialize(model=tiny("llama"), config=config)
    skipped, scales = [], []
    for step, ids in enumerate(batches(4, tiny_model_config("llama")["vocab_size"])):
        engine.backward(engine(ids))
        if step == 1 and engine.parallel_model.groups.tp_rank == 1:
            engine.optimizer.master.grad[0] = float("inf")
        before = engine.optimizer.skipped_steps
        engine.step()
        skipped.append(float(engine.optimizer.skipped_steps - before))
        scales.append(engine.loss_scale)
    lowest, highest = torch.tensor(skipped), torch.tensor(skipped)
    dist.all_reduce(lowest, op=dist.ReduceOp.MIN)
    dist.all_reduce(highest, op=dist.ReduceOp.MAX)
    return {"skipped_lowest": lowest.tolist(), "skipped_highest": highest.tolist(), "scales": scales}


def engine_resume_run(
    model_key: str, dims: ParallelDims, directory: str, *, fp16: bool = False, **layout: object
) -> dict:
    """Engine checkpoint in a tp/pp layout: save after step 2, resume in a new engine; step 3's loss, the weights
    after it (so optimizer, LR schedule and loss scale too) and the loss scale must equal the uninterrupted run's."""
    import backends

    data = batches(4, tiny_model_config(model_key)["vocab_size"])
    config = resume_config(dims, fp16=fp16, **layout)
    first, *_ = backends.initialize(model=tiny(model_key), config=config)
    losses = [float(first.train_batch(dp_slice(ids, first.parallel_model))) for ids in data[:2]]
    first.save_checkpoint(directory)
    losses.append(float(first.train_batch(dp_slice(data[2], first.parallel_model))))
    second, *_ = backends.initialize(model=tiny(model_key), config=config)
    second.load_checkpoint(directory)
    resumed = float(second.train_batch(dp_slice(data[2], second.parallel_model)))
    after = dict(second.module.named_parameters())
    param_diff = max(
        (param.detach().float() - after[name].detach().float()).abs().max().item()
        for name, param in first.module.named_parameters()
    )
    return {
        "loss_diff": abs(resumed - losses[2]),
        "param_diff": param_diff,
        "losses": losses,
        "resumed": resumed,
        "scale_diff": abs(first.loss_scale - second.loss_scale),
        "loss_scale": second.loss_scale,
        "lr_diff": abs(first.optimizer.param_groups[0]["lr"] - second.optimizer.param_groups[0]["lr"]),
        "reference_losses": losses,
    }


def json_job(collect: Callable[[], dict]) -> None:
    """A torchrun job's frame: `--out FILE`, gloo, seed 0, then rank 0 writes what `collect()` returns there,
    atomically, once every rank has collected (tests/compression_runs.py, tests/compression_residual_run.py)."""
    import argparse

    from planner.files import write_json_atomic

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    results = collect()
    if dist.get_rank() == 0:
        write_json_atomic(args.out, results)
    dist.barrier()
    dist.destroy_process_group()
