"""engine.json: a DeepSpeed-style config plus one `hardware_selector` block of our own.

The same file drives DeepSpeed or our engine, so every DeepSpeed key we accept
means what it means in DeepSpeed. DeepSpeed's implementation-detail keys are
accepted and its features we lack are one line naming the nearest thing we
have (planner/contract/deepspeed_keys.py); every block forbids unknown keys,
so a typo is a one-line error, never silence.

It is part of the planner's typed contract (docs/architecture.md): the
emitter builds an EngineConfig and writes it out, and the engine reads the
same model back, so the two sides cannot drift. The layout is the one
ParallelDims value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, Strict, ValidationError, model_validator

from planner.contract.config_dialects import translate_seed_keys
from planner.contract.deepspeed_keys import without_deepspeed_only_keys
from planner.contract.layout import ParallelDims
from planner.contract.schema import SCHEMA_VERSION, describe_validation_error, read_json_file
from planner.errors import UserInputError
from planner.limits import MAX_BATCH


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# "3" is not a stage, "yes" is not true, true is not a batch of 1 and "1e-3" is a string where a rate
# belongs: pydantic would coerce each, and the config would mean something it did not write. Counts, rates
# and switches are strict (a count may not be 8.0 either); bucket sizes stay lax: DeepSpeed's own examples
# write them as 5e8.
Switch = Annotated[bool, Strict()]
Count = Annotated[int, Strict()]
Number = Annotated[float, Strict()]  # an int is a number too; a bool or a string is not


class OptimizerParams(_Strict):
    lr: Number = Field(default=1e-3, ge=0)
    betas: tuple[Number, Number] = (0.9, 0.999)
    eps: Number = Field(default=1e-8, gt=0)
    weight_decay: Number = Field(default=0.0, ge=0)
    adam_w_mode: Switch = True  # DeepSpeed's "Adam" is AdamW unless this is false
    torch_adam: Switch = True  # accepted for DeepSpeed compatibility: we always use torch's Adam
    momentum: Number = Field(default=0.0, ge=0)  # SGD
    nesterov: Switch = False  # SGD
    dampening: Number = 0.0  # SGD


class OptimizerBlock(_Strict):
    type: Literal["AdamW", "Adam", "SGD"] = "AdamW"
    params: OptimizerParams = OptimizerParams()


class SchedulerParams(_Strict):
    warmup_min_lr: Number = 0.0
    warmup_max_lr: Number | None = None  # None: the optimizer's lr, as in DeepSpeed
    warmup_num_steps: Count = Field(default=1000, gt=0)
    warmup_type: Literal["log", "linear"] = "log"
    total_num_steps: Count | None = Field(default=None, gt=0)
    warmup_min_ratio: Number = 0.0
    cos_min_ratio: Number = 0.0001
    last_batch_iteration: Count = -1


class SchedulerBlock(_Strict):
    type: Literal["WarmupLR", "WarmupDecayLR", "WarmupCosineLR"]
    params: SchedulerParams = SchedulerParams()

    @model_validator(mode="after")
    def _needs_total(self) -> SchedulerBlock:
        if self.type != "WarmupLR" and self.params.total_num_steps is None:
            raise ValueError(f"scheduler {self.type} needs params.total_num_steps")
        return self


class OffloadOptimizer(_Strict):
    device: Literal["none", "cpu"] = "none"
    pin_memory: Switch = False


class ZeroBlock(_Strict):
    stage: Annotated[int, Strict()] = Field(default=0, ge=0, le=3)
    offload_optimizer: OffloadOptimizer = OffloadOptimizer()
    overlap_comm: Switch = True
    reduce_bucket_size: int = Field(default=int(5e8), gt=0)  # elements, as in DeepSpeed
    allgather_bucket_size: int = Field(default=int(5e8), gt=0)
    stage3_prefetch_bucket_size: int = Field(default=int(5e7), ge=0)
    contiguous_gradients: Switch = True  # always true for us; accepted for compatibility
    reduce_scatter: Switch = True  # always true for us; accepted for compatibility


class Fp16Block(_Strict):
    enabled: Switch = False
    loss_scale: Number = Field(default=0.0, ge=0)  # 0 = dynamic
    initial_scale_power: Count = Field(default=16, ge=0, le=32)  # 2**32: DeepSpeed's own examples stay at 16
    loss_scale_window: Count = Field(default=1000, gt=0)
    hysteresis: Count = Field(default=2, ge=1)
    consecutive_hysteresis: Switch = False
    min_loss_scale: Number = Field(default=1.0, gt=0)


class Bf16Block(_Strict):
    enabled: Switch = False


class ModelBlock(_Strict):
    name: str
    hf_config: dict[str, Any]


class CheckpointBlock(_Strict):
    """Our optional additions: where and how often the engine checkpoints."""

    save_dir: str | None = None  # where save_checkpoint() / load_checkpoint() called without a folder write and read
    keep_last: Count = Field(default=2, ge=1)
    async_save: Switch = False


class ProfilingBlock(_Strict):
    """Ours: a torch profiler trace of optimizer step `step`, written to `output` (backends/monitoring/profiling.py)."""

    step: Count = Field(default=3, ge=1)
    output: str = "profiles"


PipelineScheduleName = Literal["gpipe", "1f1b", "interleaved-1f1b"]


class HardwareSelectorBlock(_Strict):
    schema_version: Count = SCHEMA_VERSION
    model: ModelBlock | None = None
    seq_len: Count = Field(default=128, ge=1)
    device: Literal["cpu", "cuda"] = "cpu"
    dist_backend: Literal["gloo", "nccl"] = "gloo"
    activation_checkpointing: Literal["none", "selective", "op", "full"] = "none"
    # The blocks' element-wise kernels: transformers' eager modules, torch.compile of each block, or Liger's
    # (backends/parts/kernels.py).
    kernels: Literal["eager", "compile", "liger"] = "eager"
    # How data-parallel gradients travel (backends/parts/compression.py); the fp32 master is unaffected.
    compression: Literal["none", "fp32", "bf16", "fp16", "int8", "onebit"] = "none"
    # int8 / onebit: the first optimizer steps sum the gradients uncompressed (1-bit Adam's warm-up, its
    # freeze_step), while they are large and change fast.
    compression_warmup_steps: Count = Field(default=0, ge=0)
    layout: ParallelDims = ParallelDims()
    sequence_parallel: Switch = False
    # Expert parallelism: assignments one rank may send to each expert, as a multiple of an even share
    # (backends/expert_parallel/dispatch.py); 0 drops no token.
    expert_capacity_factor: Number = Field(default=0.0, ge=0.0, le=64.0)
    pipeline_schedule: PipelineScheduleName = "1f1b"
    checkpoint: CheckpointBlock = CheckpointBlock()
    profiling: ProfilingBlock | None = None

    @model_validator(mode="after")
    def _schedule_fits_layout(self) -> HardwareSelectorBlock:
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(
                f"schema_version {self.schema_version} is not this version's {SCHEMA_VERSION}; "
                "re-emit the run folder with `hardware-selector plan ... --emit DIR --force`"
            )
        interleaved = self.pipeline_schedule == "interleaved-1f1b"
        if self.layout.virtual_stages > 1 and not interleaved:
            raise ValueError(f"virtual_stages {self.layout.virtual_stages} needs pipeline_schedule 'interleaved-1f1b'")
        if interleaved and self.layout.pp > 1 and self.layout.virtual_stages < 2:
            raise ValueError("pipeline_schedule 'interleaved-1f1b' needs layout.virtual_stages of 2 or more")
        if self.sequence_parallel and self.layout.tp == 1:
            raise ValueError("sequence_parallel splits along tensor parallelism; it needs layout.tp of 2 or more")
        return self


class EngineConfig(_Strict):
    # (key, what became of it) for the keys it was loaded from that are not ours: a seed library's
    # (planner/contract/config_dialects.py) or DeepSpeed's only (planner/contract/deepspeed_keys.py),
    # translated or dropped; the engine's start-up line, not a setting.
    _key_fates: list[tuple[str, str]] = PrivateAttr(default_factory=list)

    train_batch_size: Count | None = Field(default=None, ge=1, le=MAX_BATCH)
    train_micro_batch_size_per_gpu: Count | None = Field(default=None, ge=1, le=MAX_BATCH)
    gradient_accumulation_steps: Count | None = Field(default=None, ge=1, le=MAX_BATCH)
    optimizer: OptimizerBlock = OptimizerBlock()
    scheduler: SchedulerBlock | None = None
    zero_optimization: ZeroBlock = ZeroBlock()
    fp16: Fp16Block = Fp16Block()
    bf16: Bf16Block = Bf16Block()
    gradient_clipping: Number = Field(default=0.0, ge=0)
    # DeepSpeed's: the dtype of data-parallel gradient averaging (default: the compute dtype)
    communication_data_type: Literal["fp32", "fp16", "bf16"] | None = None
    steps_per_print: Count = Field(default=10, ge=1)
    hardware_selector: HardwareSelectorBlock = HardwareSelectorBlock()

    @model_validator(mode="after")
    def _one_precision(self) -> EngineConfig:
        if self.fp16.enabled and self.bf16.enabled:
            raise ValueError("fp16 and bf16 are both enabled; enable at most one")
        ours = self.hardware_selector.compression
        if self.communication_data_type and ours != "none" and ours != self.communication_data_type:
            raise ValueError(
                f"communication_data_type '{self.communication_data_type}' and hardware_selector."
                f"compression '{ours}' disagree; set one of them"
            )
        if ours == "onebit":
            self._check_onebit_adam()
        return self

    def _check_onebit_adam(self) -> None:
        """onebit is 1-bit Adam (backends/parts/onebit_adam.py, docs/parallelism.md "Gradient compression"): every
        rank averages its whole momentum, so ZeRO-0 only, an Adam optimizer, and a warm-up to freeze v after."""
        stage = self.zero_optimization.stage
        if stage != 0:
            raise ValueError(
                f"compression 'onebit' is 1-bit Adam, which needs each rank's whole momentum: use "
                f"zero_optimization.stage 0 (ZeRO-{stage} shards it), or int8"
            )
        if self.optimizer.type == "SGD":
            raise ValueError("compression 'onebit' is 1-bit Adam: it needs optimizer type Adam or AdamW, not SGD")
        if self.hardware_selector.compression_warmup_steps < 1:
            raise ValueError(
                "compression 'onebit' (1-bit Adam) freezes Adam's variance after compression_warmup_steps; "
                "set it to 1 or more (plans write 20% of the run's steps)"
            )

    @property
    def gradient_compression(self) -> str:
        """The backends/parts/compression.py mode of the engine's data-parallel gradient reductions."""
        if self.hardware_selector.compression != "none":
            return self.hardware_selector.compression
        return self.communication_data_type or "none"

    def batch_sizes(self, data_parallel: int) -> tuple[int, int, int]:
        """(train_batch_size, micro_batch, grad_accum) filled in the way DeepSpeed does."""
        train, micro, accum = (
            self.train_batch_size,
            self.train_micro_batch_size_per_gpu,
            self.gradient_accumulation_steps,
        )
        if micro is None and accum is None:
            micro, accum = (train // data_parallel if train else 1), 1
        elif micro is None:
            assert accum is not None
            micro = (train // (accum * data_parallel)) if train else 1
        elif accum is None:
            accum = (train // (micro * data_parallel)) if train else 1
        assert micro is not None and accum is not None
        if micro < 1 or accum < 1 or (train is not None and train != micro * accum * data_parallel):
            raise UserInputError(
                f"train_batch_size {train} != micro batch {micro} x accumulation {accum} x data parallel "
                f"{data_parallel}; fix one of the three batch keys"
            )
        return micro * accum * data_parallel, micro, accum

    @property
    def compute_dtype_name(self) -> str:
        return "fp16" if self.fp16.enabled else "bf16" if self.bf16.enabled else "fp32"


def load_engine_config(source: str | Path | dict | EngineConfig) -> EngineConfig:
    """An EngineConfig from a path to engine.json, a dict, or an EngineConfig."""
    if isinstance(source, EngineConfig):
        return source
    origin = "engine config"
    if isinstance(source, (str, Path)):
        origin = str(source)
        source = read_json_file(Path(source), "pass the engine.json of a run folder")
    if not isinstance(source, dict):
        raise UserInputError(f"{origin} must be a JSON object")
    fates: list[tuple[str, str]] = []
    source = translate_seed_keys(source, origin, fates)  # a seed library's flat dict, in our words
    source = without_deepspeed_only_keys(source, origin, fates)  # a ds_config.json drives the engine unchanged
    try:
        config = EngineConfig.model_validate(source)
    except ValidationError as error:
        raise UserInputError(f"{origin}: {describe_validation_error(error, 'docs/engine.md')}") from None
    config._key_fates = fates  # printed once by the engine at start-up (backends/engine/initialize.py)
    return config


def with_changes(config: EngineConfig, changes: dict[str, Any], fate: tuple[str, str] | None = None) -> EngineConfig:
    """`config` with top-level keys replaced (None: unset, the default) and validated again; the keys it was
    written with stay the ones set, its key fates are kept and `fate` is added to them."""
    document = {**config.model_dump(exclude_unset=True), **changes}
    try:
        changed = EngineConfig.model_validate({key: value for key, value in document.items() if value is not None})
    except ValidationError as error:
        raise UserInputError(f"engine config: {describe_validation_error(error, 'docs/engine.md')}") from None
    changed._key_fates = [*config._key_fates, *([fate] if fate else [])]
    return changed


def key_fates_line(config: EngineConfig) -> str | None:
    """One line saying what became of the keys `config` was loaded from that are not ours (a seed library's,
    DeepSpeed's only, initialize's pipeline=True), or None."""
    fates = config._key_fates
    if not fates:
        return None
    changed = [f"{key} {fate}" for key, fate in fates if fate != "dropped"]
    dropped = [key for key, fate in fates if fate == "dropped"]
    parts = changed + ([f"dropped (no effect on what is trained): {', '.join(dropped)}"] if dropped else [])
    return "Config keys: " + "; ".join(parts) + " (docs/engine.md, Configs from other libraries)"
