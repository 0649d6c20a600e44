"""Measure training steps of benchmark configs under torchrun (DDP and FSDP).

    torchrun --nproc-per-node N -m benchmarks_db.measure JOBS.json RESULTS_DIR

JOBS.json holds {"jobs": [MeasureJob, ...]}; usually one job per launch, so a
crash or OOM costs only that config, but a shared launch measures several
configs in one process group (cheaper start-up on small machines). Rank 0
writes RESULTS_DIR/<key>.json per job: the step times (slowest rank per
step), the peak memory of every rank, or the error that stopped the job.

This is the project's minimal measuring loop; `backends.run` runs the full
engine and adapters. It times exactly: forward, backward, optimizer step.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, Field

from planner.training_config import TrainingConfig

SUPPORTED_STRATEGIES = ("ddp", "fsdp")


class MeasureJob(BaseModel):
    key: str
    model: str  # catalog name
    tiny: bool
    gpu: str = "cpu"  # catalog GPU the config was planned for
    config: TrainingConfig
    steps: int = Field(default=8, ge=1)
    warmup: int = Field(default=2, ge=0)
    seed: int = 0


class MeasureResult(BaseModel):
    key: str
    world_size: int
    step_times_s: list[float] = Field(default_factory=list)
    peak_memory_per_rank_bytes: list[int] = Field(default_factory=list)
    memory_kind: str = ""  # "cuda max allocated" or "host RSS high-water mark"
    error: Optional[str] = None


def unsupported_reason(config: TrainingConfig) -> str | None:
    """Why this loop cannot measure a config (None when it can)."""
    if config.strategy.value not in SUPPORTED_STRATEGIES:
        return f"{config.strategy.value} is measured by backends.run, not by the minimal loop"
    if config.strategy.value == "fsdp" and config.fsdp_sharding.value not in ("full", "grad-op"):
        return f"FSDP sharding {config.fsdp_sharding.value} is not measured by the minimal loop"
    if config.tensor_parallel > 1 or config.pipeline_parallel > 1 or config.lora_rank or config.activation_checkpointing.value == "selective":
        return "TP/PP, LoRA and selective checkpointing are measured by backends.run"
    if config.offload_optimizer.value != "none" or config.offload_params.value != "none":
        return "offload is measured by backends.run"
    return None


def _wrap(model, config: TrainingConfig, device):
    import torch.distributed as dist

    if config.strategy.value == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    reshard = config.fsdp_sharding.value == "full"  # grad-op keeps params gathered from forward to backward
    blocks = _blocks(model)
    for block in blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    return model


def _blocks(model) -> list:
    """The repeated transformer blocks: the largest ModuleList in the model."""
    import torch

    lists = [module for module in model.modules() if isinstance(module, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


def _optimizer(parameters, config: TrainingConfig):
    import torch

    if config.optimizer.value == "sgd":
        return torch.optim.SGD(parameters, lr=1e-4, momentum=0.9)
    return torch.optim.AdamW(parameters, lr=1e-4)


def _peak_memory(device) -> tuple[int, str]:
    import resource

    import torch

    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), "cuda max allocated"
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "host RSS high-water mark"


def run_job(job: MeasureJob, device) -> MeasureResult:
    import torch
    import torch.distributed as dist

    from backends.model_factory import build_causal_lm, catalog_config, tiny_config

    config = job.config
    reason = unsupported_reason(config)
    if reason:
        return MeasureResult(key=job.key, world_size=dist.get_world_size(), error=reason)
    hf_config = catalog_config(job.model)
    if job.tiny:
        hf_config = tiny_config(hf_config)
    dtype = torch.bfloat16 if config.precision.value == "bf16" else None
    model = build_causal_lm(hf_config, seed=job.seed, dtype=dtype).to(device)
    if config.activation_checkpointing.value == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    wrapped = _wrap(model, config, device)
    optimizer = _optimizer(wrapped.parameters(), config)
    autocast_dtype = {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16}.get(config.precision.value)
    generator = torch.Generator().manual_seed(job.seed + dist.get_rank())
    vocab = hf_config["vocab_size"]
    batches = [torch.randint(0, vocab, (config.micro_batch, config.seq_len), generator=generator).to(device)
               for _ in range(config.grad_accum)]
    times: list[float] = []
    for step in range(job.warmup + job.steps):
        dist.barrier()
        _synchronize(device)
        start = time.perf_counter()
        for batch in batches:
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                loss = wrapped(input_ids=batch, labels=batch).loss / config.grad_accum
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _synchronize(device)
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # a step ends when its slowest rank does
        if step >= job.warmup:
            times.append(float(elapsed.item()))
    peak, kind = _peak_memory(device)
    peaks: list = [None] * dist.get_world_size()
    dist.all_gather_object(peaks, peak)
    return MeasureResult(key=job.key, world_size=dist.get_world_size(), step_times_s=times,
                         peak_memory_per_rank_bytes=peaks, memory_kind=kind)


def _synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str]) -> int:
    import torch
    import torch.distributed as dist

    from .paths import write_text_atomic

    jobs_file, results_dir = Path(argv[0]), Path(argv[1])
    jobs = [MeasureJob.model_validate(job) for job in json.loads(jobs_file.read_text())["jobs"]]
    use_cuda = torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES", None) != ""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    try:
        for job in jobs:
            result = run_job(job, device)
            if dist.get_rank() == 0:
                write_text_atomic(results_dir / f"{job.key}.json", result.model_dump_json())
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
