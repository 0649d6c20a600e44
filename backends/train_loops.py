"""The example script's hand-written loops: torch DDP, DeepSpeed, and accelerate (FSDP or DeepSpeed).

Each loop runs `steps` optimizer steps of `grad_accum` micro-batches and
reports the first micro-step's loss averaged over ranks (before any update,
so it equals a single-process forward over the same samples) and the last.
"""

from __future__ import annotations

import json
import os
from contextlib import nullcontext
from typing import Any

from planner.emit.target import ADAM_BETAS, ADAM_EPS, GRADIENT_CLIPPING, WEIGHT_DECAY

from .cpu_distributed import configure_cpu_accelerate_state, skip_deepspeed_shm_build
from .distributed_init import shutdown_distributed
from .train import TrainRun, report

_AUTOCAST_DTYPE = {"bf16": "bfloat16", "fp16": "float16"}


def torch_optimizer(run: TrainRun, parameters: Any) -> Any:
    """The client optimizer when the config names none (CPU plans): torch AdamW, or SGD for SGD plans."""
    import torch

    if run.plan.config.optimizer.value == "sgd":
        return torch.optim.SGD(parameters, lr=run.target.learning_rate, momentum=0.9)
    return torch.optim.AdamW(
        parameters, lr=run.target.learning_rate, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=WEIGHT_DECAY
    )


def _mean_over_ranks(value: float, device: Any) -> float:
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return float(tensor.item()) / dist.get_world_size()


def _local_device(target) -> Any:
    import torch

    if target.device == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def run_ddp(run: TrainRun) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group(run.target.dist_backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = _local_device(run.target)
    model = run.build_model().to(device)
    if run.wants_recompute():
        model.gradient_checkpointing_enable()
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch_optimizer(run, ddp.parameters())
    compute = run.target.mixed_precision
    autocast = (
        torch.autocast(device.type, dtype=getattr(torch, _AUTOCAST_DTYPE[compute]))
        if compute in _AUTOCAST_DTYPE
        else nullcontext()
    )
    scaler = torch.amp.GradScaler(device.type) if compute == "fp16" else None
    losses = []
    accum = run.target.grad_accum
    for index, batch in enumerate(run.batches(rank, world)):
        boundary = (index + 1) % accum == 0
        with (nullcontext() if boundary else ddp.no_sync()), autocast:
            loss = ddp(input_ids=batch["input_ids"].to(device), labels=batch["labels"].to(device)).loss
        losses.append(loss.item())
        scaled = loss / accum
        (scaler.scale(scaled) if scaler else scaled).backward()
        if boundary:
            if scaler:
                scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(ddp.parameters(), GRADIENT_CLIPPING)
            (scaler.step(optimizer), scaler.update()) if scaler else optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    first = _mean_over_ranks(losses[0], device)
    report(run, "ddp", rank, world_size=world, wrapper=type(ddp).__name__, first_loss=first, losses=losses)
    shutdown_distributed()


def run_deepspeed(run: TrainRun) -> None:
    import deepspeed
    import torch.distributed as dist

    if run.target.device == "cpu":
        skip_deepspeed_shm_build()
    deepspeed.init_distributed(dist_backend=run.target.dist_backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    config = json.loads((run.run_dir / "ds_config.json").read_text(encoding="utf-8"))
    model = run.build_model()
    if run.wants_recompute():
        model.gradient_checkpointing_enable()
    client_optimizer = None if "optimizer" in config else torch_optimizer(run, model.parameters())
    engine, *_ = deepspeed.initialize(
        model=model,
        optimizer=client_optimizer,
        model_parameters=model.parameters() if client_optimizer is None else None,
        config=config,
    )
    losses = []
    for batch in run.batches(rank, world):
        loss = engine(input_ids=batch["input_ids"].to(engine.device), labels=batch["labels"].to(engine.device)).loss
        losses.append(loss.item())
        engine.backward(loss)
        engine.step()
    first = _mean_over_ranks(losses[0], engine.device)
    report(
        run, "deepspeed", rank, world_size=world, wrapper=type(engine).__name__,
        zero_stage=engine.zero_optimization_stage(), optimizer=type(engine.optimizer).__name__,
        optimizer_steps=engine.global_steps, first_loss=first, losses=losses,
    )
    shutdown_distributed()


def run_accelerate(run: TrainRun) -> None:
    from accelerate import Accelerator
    from accelerate.utils import DistributedType, DummyOptim, DummyScheduler

    deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "false") == "true"
    if run.target.device == "cpu":
        configure_cpu_accelerate_state("deepspeed" if deepspeed else run.target.strategy.value)
    # Built before the Accelerator: under a ZeRO-3 plugin transformers would build it inside
    # deepspeed.zero.Init, whose random init differs from every other backend's.
    model = run.build_model()
    # With DeepSpeed the accumulation comes from ds_config.json.
    accelerator = Accelerator() if deepspeed else Accelerator(gradient_accumulation_steps=run.target.grad_accum)
    if run.wants_recompute() and accelerator.distributed_type is not DistributedType.FSDP:
        model.gradient_checkpointing_enable()  # FSDP recomputes through fsdp_activation_checkpointing
    ds_config = accelerator.state.deepspeed_plugin.deepspeed_config if deepspeed else {}
    if "optimizer" in ds_config:
        optimizer: Any = DummyOptim(model.parameters(), lr=run.target.learning_rate)
    else:
        optimizer = torch_optimizer(run, model.parameters())
    prepared = [model, optimizer]
    if "scheduler" in ds_config:
        prepared.append(DummyScheduler(optimizer))
    model, optimizer, *_ = accelerator.prepare(*prepared)
    rank, world = accelerator.process_index, accelerator.num_processes
    losses = []
    for batch in run.batches(rank, world):
        with accelerator.accumulate(model):
            loss = model(input_ids=batch["input_ids"].to(accelerator.device), labels=batch["labels"].to(accelerator.device)).loss
            losses.append(loss.item())
            accelerator.backward(loss)
            if accelerator.sync_gradients and not deepspeed:
                accelerator.clip_grad_norm_(model.parameters(), GRADIENT_CLIPPING)
            optimizer.step()
            optimizer.zero_grad()
    first = _mean_over_ranks(losses[0], accelerator.device)
    report(
        run, "accelerate", rank, world_size=world, wrapper=type(model).__name__,
        distributed_type=accelerator.distributed_type.value, first_loss=first, losses=losses,
        **({"zero_stage": model.zero_optimization_stage()} if deepspeed else {}),
    )
    accelerator.end_training()
    shutdown_distributed()
