"""Where and how a plan runs: devices, processes, launcher and batch, as every emitted file states them.

A RunTarget is computed once per emission and every artifact reads its
numbers from it, so batch sizes, precision and world size cannot disagree
between files. It is stored in plan.json under "run" for the training script.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from ..errors import UserInputError
from ..plan import Plan
from ..training_config import Precision, Strategy
from .hf_model import DECODER_LAYER_CLASS, decoder_layer_class, hf_config_for

RUN_SCHEMA_VERSION = 1

# Hyperparameters the emitted configs start from (GPT-3 / Llama recipes); users edit them.
LEARNING_RATE = 3e-4
ADAM_BETAS = (0.9, 0.95)
ADAM_EPS = 1e-8
WEIGHT_DECAY = 0.1
WARMUP_STEPS = 100
GRADIENT_CLIPPING = 1.0
DEFAULT_MASTER_PORT = 29500

Launcher = Literal["torchrun", "accelerate", "deepspeed"]
TrainMode = Literal["ddp", "deepspeed", "accelerate", "engine"]

_LAUNCH_BY_STRATEGY: dict[Strategy, tuple[Launcher, TrainMode]] = {
    Strategy.DDP: ("torchrun", "ddp"),
    Strategy.FSDP: ("accelerate", "accelerate"),
    Strategy.DEEPSPEED: ("deepspeed", "deepspeed"),
    Strategy.ENGINE: ("torchrun", "engine"),
}


class RunTarget(BaseModel):
    """The concrete run a folder describes (the "run" block of plan.json)."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = RUN_SCHEMA_VERSION
    strategy: Strategy
    device: Literal["cpu", "cuda"]
    dist_backend: Literal["gloo", "nccl"]
    nproc_per_node: int = Field(ge=1)
    num_nodes: int = Field(ge=1)
    nproc_overridden: bool = False
    data_parallel: int = Field(ge=1)
    tensor_parallel: int = Field(ge=1)
    pipeline_parallel: int = Field(ge=1)
    micro_batch: int = Field(ge=1)
    grad_accum: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    precision: Precision
    launcher: Launcher
    train_mode: TrainMode
    model_name: str
    hf_config: dict[str, Any]
    decoder_layer_class: Optional[str] = None
    learning_rate: float = LEARNING_RATE

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.num_nodes

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: DeepSpeed's train_batch_size."""
        return self.micro_batch * self.grad_accum * self.data_parallel

    @property
    def mixed_precision(self) -> Literal["no", "fp16", "bf16"]:
        """accelerate's and the Trainer's name for the precision."""
        return {"fp32": "no", "fp16": "fp16", "bf16": "bf16"}[self.precision.compute_dtype]  # type: ignore[return-value]


def run_target(plan: Plan, nproc_override: int | None = None) -> RunTarget:
    config, cluster = plan.config, plan.cluster
    nproc = cluster.gpus_per_node if nproc_override is None else nproc_override
    if nproc < 1:
        raise UserInputError(f"--nproc must be at least 1, got {nproc}")
    world = nproc * cluster.num_nodes
    model_parallel = config.tensor_parallel * config.pipeline_parallel
    if world % model_parallel:
        raise UserInputError(
            f"{world} processes cannot hold tp {config.tensor_parallel} x pp {config.pipeline_parallel}; "
            f"use a process count that is a multiple of {model_parallel}"
        )
    on_cpu = cluster.gpu.kind == "cpu"
    launcher, mode = _LAUNCH_BY_STRATEGY[config.strategy]
    # Only FSDP needs the block class; the others record it when the table knows it.
    block = (
        decoder_layer_class(plan.model)
        if config.strategy is Strategy.FSDP
        else DECODER_LAYER_CLASS.get(plan.model.model_type)
    )
    return RunTarget(
        strategy=config.strategy,
        device="cpu" if on_cpu else "cuda",
        dist_backend="gloo" if on_cpu else "nccl",
        nproc_per_node=nproc,
        num_nodes=cluster.num_nodes,
        nproc_overridden=nproc_override is not None and nproc_override != cluster.gpus_per_node,
        data_parallel=world // model_parallel,
        tensor_parallel=config.tensor_parallel,
        pipeline_parallel=config.pipeline_parallel,
        micro_batch=config.micro_batch,
        grad_accum=config.grad_accum,
        seq_len=config.seq_len,
        precision=config.precision,
        launcher=launcher,
        train_mode=mode,
        model_name=plan.model.name,
        hf_config=hf_config_for(plan.model),
        decoder_layer_class=block,
    )

