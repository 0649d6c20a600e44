"""RunConfig: the run a folder describes, as the runner (`python -m backends.run`) reads it.

It is plan.json's "run" block. The emitter computes it once from the plan
(planner/rundir/run_options.py) and writes every other file of the folder from it
(ds_config.json, engine.json, training_args.json, launch.sh), so batch sizes,
precision, layout and hyperparameters cannot disagree between files. The
runner reads the same model back; `backends/` sees the planner only through
this contract (docs/architecture.md).

What it holds, block by block:
- where: device, process counts, the ParallelDims layout, batch, precision (the strategy and its
  options are the plan's TrainingConfig, beside this block in plan.json);
- model: which HF config, and whether training starts from local weights or from scratch;
- data: local files (or synthetic tokens), tokenizer, evaluation split;
- optim: the hyperparameters every adapter applies the same way;
- anomaly, checkpoint: what to do about a bad step, and when to save and export;
- predicted: the plan's step time and memory, set beside the measured ones at the end;
- search: what the search that found the plan was restricted to (`tune RUN_DIR` searches the same).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.contract.choices import Precision
from planner.contract.layout import ParallelDims
from planner.contract.schema import SCHEMA_VERSION
from planner.contract.search_restrictions import SearchRestrictions
from planner.contract.sources import CORRECTED_SOURCES

Launcher = Literal["torchrun", "accelerate", "deepspeed", "mpirun"]  # what launch.sh starts by default
Init = Literal["pretrained", "random"]
Task = Literal["causal-lm", "masked-lm", "seq2seq-lm"]
TextUnit = Literal["line", "paragraph", "document"]
AnomalyAction = Literal["warn", "skip-step", "stop"]
Schedule = Literal["cosine", "linear", "constant"]

MAX_SEQ_LEN = 1 << 24
MAX_STEPS = 1 << 40


class _Block(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelSource(_Block):
    """The model a run trains: its HF config always, its weights when `init` is pretrained."""

    name: str
    hf_config: dict[str, Any]
    path: str | None = None  # a local HF folder: config.json, safetensors, maybe a tokenizer
    init: Init = "random"
    init_explicit: bool = False  # `init` was asked for (--init), not inferred from the folder's files
    tokenizer: str | None = None  # a local tokenizer folder (default: `path`)
    task: Task = "causal-lm"
    block_class: str | None = None  # the repeated transformer block (FSDP wrapping)

    @model_validator(mode="after")
    def _weights_need_a_folder(self) -> ModelSource:
        if self.init == "pretrained" and not self.path:
            raise ValueError(f"init 'pretrained' needs a local model folder; {self.name} has none (use init 'random')")
        return self

    @property
    def tokenizer_dir(self) -> str | None:
        return self.tokenizer or self.path


class DataConfig(_Block):
    """Local text data; with no `train` files the run streams synthetic tokens (a smoke test)."""

    train: list[str] = Field(default_factory=list)  # files, globs or a datasets.save_to_disk folder
    eval: list[str] = Field(default_factory=list)  # a separate evaluation set (else a held-out fraction)
    text_field: str = "text"  # the column of .jsonl / .parquet / saved datasets that holds the text
    text_unit: TextUnit = "paragraph"  # what one document of a .txt file is
    eval_fraction: float = Field(default=0.01, ge=0.0, lt=1.0)
    eval_max_blocks: int = Field(default=1000, ge=0, le=1 << 30)
    eval_every: int = Field(default=0, ge=0, le=MAX_STEPS)  # steps; 0: at the end only
    seed: int = Field(default=0, ge=0, le=2**63 - 1)

    @property
    def synthetic(self) -> bool:
        return not self.train

    @model_validator(mode="after")
    def _eval_needs_train(self) -> DataConfig:
        # At emit and at train, not first in the ranks' data preparation: synthetic tokens evaluate nothing.
        if self.eval and not self.train:
            raise ValueError("--eval-data needs --data: synthetic tokens have nothing to evaluate against")
        return self


AUTO_WARMUP_FRACTION = 0.05
AUTO_WARMUP_CAP = 100
# An SGD plan's momentum, which the plan counts a buffer for: the run folder's SGD and the Trainer's optim_args.
SGD_MOMENTUM = 0.9


class Hyperparameters(_Block):
    """Optimizer and schedule; the same numbers reach DeepSpeed, our engine, DDP, FSDP and the Trainer."""

    learning_rate: float = Field(default=3e-4, gt=0, le=10)
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = Field(default=1e-8, gt=0, le=1)
    weight_decay: float = Field(default=0.1, ge=0, le=10)
    warmup_steps: int | None = Field(default=None, ge=0, le=MAX_STEPS)  # None: 5% of the run, at most 100
    schedule: Schedule = "cosine"  # after the linear warmup, down to min_lr_ratio x learning_rate
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    gradient_clipping: float = Field(default=1.0, ge=0, le=1e6)  # 0: no clipping
    max_steps: int | None = Field(default=None, ge=1, le=MAX_STEPS)  # None: `epochs` over the data
    epochs: float = Field(default=1.0, gt=0, le=1e6)
    dropout: float | None = Field(default=None, ge=0, lt=1)  # None: as the model's config says
    seed: int = Field(default=0, ge=0, le=2**63 - 1)

    def warmup_for(self, total_steps: int | None) -> int:
        """Warmup steps: the given number, or 5% of the run (at most 100, at least 1)."""
        if self.warmup_steps is not None:
            return max(1, self.warmup_steps)
        if not total_steps:
            return AUTO_WARMUP_CAP
        return max(1, min(AUTO_WARMUP_CAP, -(-total_steps * 5 // 100)))

    @model_validator(mode="after")
    def _betas_in_range(self) -> Hyperparameters:
        if not all(0 <= beta < 1 for beta in self.betas):
            raise ValueError(f"betas {self.betas} must lie in [0, 1)")
        return self


class SpikeRule(_Block):
    """A value more than `factor` times its moving average over the last `window` steps."""

    action: AnomalyAction = "warn"
    factor: float = Field(default=3.0, gt=1, le=1e6)
    window: int = Field(default=20, ge=2, le=100_000)


class AnomalyPolicy(_Block):
    non_finite: AnomalyAction = "stop"  # a NaN or Inf loss or gradient norm
    loss_spike: SpikeRule = SpikeRule(action="warn", factor=3.0)
    grad_norm_spike: SpikeRule = SpikeRule(action="warn", factor=10.0)


class CheckpointPolicy(_Block):
    every: int = Field(default=1000, ge=0, le=MAX_STEPS)  # steps; 0: only when a run stops early
    keep_last: int = Field(default=2, ge=1, le=1000)
    export_every: int = Field(default=0, ge=0, le=MAX_STEPS)  # also write final/ every N steps; 0: at the end
    resume: bool = True  # continue from the newest checkpoint in the folder


class Predicted(_Block):
    """The plan's numbers for this run, and what MFU needs (absent: no estimate, e.g. a CPU plan)."""

    step_time_s: float | None = Field(default=None, gt=0)  # what the plan said: calibrated when it was
    # The throughput formula's own step, before any calibration: what a record stores as its prediction, since the
    # calibration fits measured against the formula (docs/benchmarks.md, "Calibration"). None in a plan.json
    # written before it was kept.
    formula_step_time_s: float | None = Field(default=None, gt=0)
    tokens_per_s: float | None = Field(default=None, gt=0)
    peak_memory_bytes: int | None = Field(default=None, ge=0)
    model_flops_per_token: float | None = Field(default=None, gt=0)
    peak_flops_per_device: float | None = Field(default=None, gt=0)
    throughput_source: str = ""
    memory_source: str = ""

    def fitting_step_time_s(self) -> float | None:
        """The prediction a record of this run stores, for the calibration to fit on: the formula's step. A
        plan.json from before formula_step_time_s whose step the records moved has no formula to give: None, so
        its calibrated figure never feeds the fit as if the formula had said it (docs/benchmarks.md)."""
        if self.formula_step_time_s is not None:
            return self.formula_step_time_s
        if self.throughput_source.startswith(CORRECTED_SOURCES):
            return None
        return self.step_time_s


class RunConfig(_Block):
    schema_version: int = SCHEMA_VERSION
    device: Literal["cpu", "cuda"]
    dist_backend: Literal["gloo", "nccl"]
    nproc_per_node: int = Field(ge=1, le=1 << 16)
    num_nodes: int = Field(ge=1, le=1 << 20)
    nproc_overridden: bool = False
    layout: ParallelDims
    micro_batch: int = Field(ge=1, le=1 << 20)
    grad_accum: int = Field(ge=1, le=1 << 20)
    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN)
    precision: Precision
    launcher: Launcher
    model: ModelSource
    data: DataConfig = DataConfig()
    optim: Hyperparameters = Hyperparameters()
    anomaly: AnomalyPolicy = AnomalyPolicy()
    checkpoint: CheckpointPolicy = CheckpointPolicy()
    predicted: Predicted = Predicted()
    search: SearchRestrictions = SearchRestrictions()

    @model_validator(mode="after")
    def _layout_fills_the_processes(self) -> RunConfig:
        if self.layout.world_size != self.world_size:
            raise ValueError(
                f"layout {self.layout.describe()} has {self.layout.world_size} ranks but the run has "
                f"{self.nproc_per_node} x {self.num_nodes} processes"
            )
        return self

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.num_nodes

    @property
    def data_parallel(self) -> int:
        return self.layout.data_parallel

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step (DeepSpeed's train_batch_size)."""
        return self.micro_batch * self.grad_accum * self.layout.data_parallel

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    @property
    def mixed_precision(self) -> Literal["no", "fp16", "bf16"]:
        """accelerate's and the Trainer's name for the precision."""
        return {"fp32": "no", "fp16": "fp16", "bf16": "bf16"}[self.precision.compute_dtype]  # type: ignore[return-value]
