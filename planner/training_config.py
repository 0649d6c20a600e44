"""How a model is trained: strategy, parallel layout, batch, precision, optimizer.

A TrainingConfig is what the memory and throughput estimators take, what the
strategy search enumerates, and (inside a plan) what the backends run. It is
checked against the model and the cluster by `check_against`, which raises a
one-line UserInputError for combinations that cannot work.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from planner.contract.choices import (
    LIGER_MODEL_TYPES,
    ActivationCheckpointing,
    AttentionKernel,
    FsdpSharding,
    GradientCompression,
    KernelChoice,
    Offload,
    OptimizerKind,
    PipelineSchedule,
    Precision,
    Strategy,
)
from planner.contract.layout import ParallelDims, default_stage_layers, describe_stage_layers, layers_per_rank
from planner.errors import UserInputError, refuse_unknown_keywords
from planner.expert_routing import ExpertRouting
from planner.limits import MAX_BATCH, MAX_SEQ_LEN
from planner.models.spec import ModelFamily, ModelSpec

# Each degree of the layout under the name its property reads back: documents written before the layout was one
# value (benchmark records of schema 1) used the first four, and `TrainingConfig(context_parallel=2)` reads as a user
# who knows `config.context_parallel` would expect.
LAYOUT_KEYWORDS = {
    "tensor_parallel": "tp",
    "pipeline_parallel": "pp",
    "virtual_stages": "virtual_stages",
    "expert_parallel": "ep",
    "context_parallel": "cp",
}


class TrainingConfig(BaseModel):
    """One way to train a model; every field has the default most users want."""

    # A key that is not a field is refused (__init__ says which was meant): ignored, a misspelt micro-batch or a
    # context-parallel degree would plan something else without a word.
    model_config = ConfigDict(frozen=True, extra="forbid")

    strategy: Strategy = Strategy.DDP
    zero_stage: int = Field(default=0, ge=0, le=3)
    fsdp_sharding: FsdpSharding = FsdpSharding.FULL
    offload_optimizer: Offload = Offload.NONE
    offload_params: Offload = Offload.NONE

    # The model-parallel split (tp, pp and its chunks, ep, cp); dp is left to the cluster (Plan.layout fills it).
    layout: ParallelDims = ParallelDims()
    sequence_parallel: bool = False
    pipeline_schedule: PipelineSchedule = PipelineSchedule.ONE_F_ONE_B

    micro_batch: int = Field(default=1, ge=1, le=MAX_BATCH)
    seq_len: int = Field(default=2048, ge=1, le=MAX_SEQ_LEN)
    grad_accum: int = Field(default=1, ge=1, le=MAX_BATCH)

    precision: Precision = Precision.BF16_MIXED
    optimizer: OptimizerKind = OptimizerKind.ADAMW
    activation_checkpointing: ActivationCheckpointing = ActivationCheckpointing.NONE
    attention: AttentionKernel = AttentionKernel.SDPA

    lora_rank: int = Field(default=0, ge=0)  # 0 = full fine-tuning
    qlora: bool = False  # LoRA on a 4-bit (NF4) frozen base
    # FP8 matmuls in the blocks (Transformer Engine / torchao float8 style) inside bf16 mixed precision;
    # planned only (docs/accuracy.md, "FP8"): the attention core, norms and the LM head stay in bf16.
    fp8: bool = False
    kernels: KernelChoice = KernelChoice.EAGER
    # MoE: the router's imbalance and the engine's capacity factor (planner/expert_routing.py).
    routing: ExpertRouting = ExpertRouting()
    # Our engine's data-parallel gradient reductions, compressed (planner/gradient_compression.py).
    compression: GradientCompression = GradientCompression.NONE
    # DeepSpeed's ZeRO++ on ZeRO-3 (qwZ, hpZ, qgZ; planner/throughput/zeropp.py): its int8 forward gathers, the
    # backward gathers inside the node from a secondary partition, int4 gradient reduction.
    zeropp: bool = False

    @model_serializer(mode="wrap")
    def _without_default_compression(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Documents written before compression and ZeRO++ were planned (plan.json, records) read the same without
        the keys, and plans without them keep writing them as they were."""
        data = handler(self)
        if self.compression is GradientCompression.NONE:
            data.pop("compression", None)
        if not self.zeropp:
            data.pop("zeropp", None)
        return data

    @model_validator(mode="before")
    @classmethod
    def _layout_keywords(cls, data: Any) -> Any:
        """A degree given by its property's name goes into the layout (LAYOUT_KEYWORDS); given there too with
        another value, it is refused. A document's stray key is refused by extra="forbid"."""
        if not isinstance(data, dict) or not any(key in data for key in LAYOUT_KEYWORDS):
            return data
        data = dict(data)
        given = data.pop("layout", None) or {}
        layout = dict(given)  # a ParallelDims iterates as its fields
        stated = given.model_fields_set if isinstance(given, ParallelDims) else set(given)
        for keyword, degree in LAYOUT_KEYWORDS.items():
            if keyword not in data:
                continue
            value = data.pop(keyword)
            if degree in stated and layout[degree] != value:
                raise UserInputError(
                    f"TrainingConfig got {keyword}={value!r} and a layout with {degree}={layout[degree]!r}: give "
                    "the degree once"
                )
            layout[degree] = value
        data["layout"] = layout
        return data

    def __init__(self, **data: Any) -> None:
        # Checked before pydantic's validation, so a stray key is one line (UnknownKeywordError, as the API's
        # functions raise) naming the field it most resembles, not a ValidationError around it.
        refuse_unknown_keywords("TrainingConfig", data, [*type(self).model_fields, *LAYOUT_KEYWORDS])
        super().__init__(**data)

    @model_validator(mode="after")
    def _check_fields(self) -> TrainingConfig:
        if self.offload_optimizer is not Offload.NONE:
            # Offload moves a sharded optimizer's states: DDP (and ZeRO-0) keeps a whole optimizer on every GPU.
            sharded_optimizer = self.strategy is Strategy.FSDP or (
                self.strategy in (Strategy.DEEPSPEED, Strategy.ENGINE) and self.zero_stage >= 1
            )
            if not sharded_optimizer:
                raise UserInputError(
                    "optimizer offload needs ZeRO stage 1 or higher or FSDP; use --strategy zero1, zero2, zero3 or fsdp"
                )
        if self.offload_params is not Offload.NONE:
            sharded_params = (self.strategy is Strategy.DEEPSPEED and self.zero_stage == 3) or (
                self.strategy is Strategy.FSDP and self.fsdp_sharding is not FsdpSharding.NONE
            )
            if not sharded_params:
                raise UserInputError("parameter offload needs ZeRO-3 or FSDP; use --strategy zero3 or fsdp")
        if (
            self.strategy is Strategy.FSDP
            and self.offload_params is Offload.NONE
            and self.offload_optimizer is not Offload.NONE
        ):
            # torch's CPUOffload(offload_params=True) moves parameters, gradients and the optimizer's step together
            # (--offload-params alone plans all three): FSDP has no optimizer-only offload to plan.
            raise UserInputError(
                "FSDP offloads the optimizer with the parameters and gradients; use --offload-params cpu"
            )
        nvme = Offload.NVME in (self.offload_optimizer, self.offload_params)
        if nvme and not (self.strategy is Strategy.DEEPSPEED and self.zero_stage == 3):
            # DeepSpeed's config docs: "NVMe offloading is available only with ZeRO stage 3"; FSDP's CPUOffload and
            # our engine's offload go to CPU memory only.
            raise UserInputError(
                "NVMe offload runs on DeepSpeed's ZeRO-3 only (ZeRO-Infinity); use --strategy zero3, or offload to cpu"
            )
        if self.strategy is not Strategy.ENGINE and (self.tensor_parallel > 1 or self.pipeline_parallel > 1):
            raise UserInputError("tensor and pipeline parallelism run on our engine; add --strategy engine")
        if self.strategy is not Strategy.ENGINE and self.expert_parallel > 1:
            # Checked before the model is known (check_against says "no experts" once it is): a dense model's fix
            # comes first, as "add --strategy engine" only leads it to that second refusal.
            raise UserInputError(
                f"--ep {self.expert_parallel} splits a mixture-of-experts model's experts over ranks: for a dense "
                "model drop --ep; for one with experts add --strategy engine (transformers' MoE layers keep every "
                f"expert on every rank under {self.strategy.value})"
            )
        if self.routing.capacity_factor and self.strategy is not Strategy.ENGINE:
            raise UserInputError(
                "--expert-capacity drops tokens in our engine's expert dispatch (transformers' MoE layers drop "
                "none); add --strategy engine or leave it out"
            )
        if self.zeropp and not (self.strategy is Strategy.DEEPSPEED and self.zero_stage == 3):
            raise UserInputError(
                "--zeropp is DeepSpeed's ZeRO++, built on ZeRO-3: use --strategy zero3 (plan: --strategies zero3), "
                "or drop --zeropp"
            )
        if self.zeropp and self.precision is not Precision.FP16_MIXED:
            raise UserInputError(
                f"--zeropp with --precision {self.precision.value}: ZeRO++'s int4 gradient kernel reads fp16 (DeepSpeed's "
                "ds_swizzle_quant), so other gradients would be misread; use --precision fp16-mixed, or drop --zeropp"
            )
        if self.zeropp and self.offload_params is not Offload.NONE:
            raise UserInputError(
                "--zeropp quantizes and re-partitions the GPU-held parameters; with --offload-params they live in "
                "CPU or NVMe memory: drop one of the two"
            )
        if self.compression is not GradientCompression.NONE and self.strategy is not Strategy.ENGINE:
            raise UserInputError(
                f"--compression {self.compression.value} compresses our engine's data-parallel gradient reductions "
                f"(backends/parts/compression.py): only --strategy engine runs it, not {self.strategy.value}; use "
                "--strategy engine, or drop --compression"
            )
        if self.compression is GradientCompression.ONEBIT and self.zero_stage != 0:
            # 1-bit Adam averages each rank's whole momentum (planner/gradient_compression.py); ZeRO-1+ shards it.
            raise UserInputError(
                f"--compression onebit is 1-bit Adam, which needs each rank's whole momentum: ZeRO-0 only "
                f"(--zero-stage 0), not ZeRO-{self.zero_stage}; or use --compression int8"
            )
        if self.compression is GradientCompression.ONEBIT and self.optimizer is OptimizerKind.SGD:
            raise UserInputError(
                "--compression onebit is 1-bit Adam; --optimizer sgd has no Adam variance to freeze: use --optimizer "
                "adamw, or --compression int8"
            )
        if self.sequence_parallel and self.tensor_parallel == 1:
            raise UserInputError("sequence parallelism splits along the tensor-parallel group; it needs --tp 2 or more")
        if self.fp8 and self.precision not in (Precision.BF16_MIXED, Precision.BF16):
            raise UserInputError("FP8 matmuls run inside bf16 mixed precision; use --precision bf16-mixed with --fp8")
        if self.fp8 and (self.lora_rank or self.qlora):
            raise UserInputError("--fp8 is planned for full training; LoRA's frozen base is not cast to FP8 here")
        if self.activation_checkpointing is ActivationCheckpointing.OP and (self.lora_rank or self.qlora):
            raise UserInputError(
                "--ac op with LoRA: the adapters' own matmuls (and a 4-bit base's, which are no matmul op) change "
                "which outputs op-level checkpointing keeps, and that is not counted; use --ac selective or --ac full"
            )
        if self.qlora and self.lora_rank == 0:
            raise UserInputError("--qlora trains LoRA adapters; give their rank with --lora-rank")
        if self.qlora and self.strategy is Strategy.DEEPSPEED and self.zero_stage == 3:
            raise UserInputError(
                "QLoRA with ZeRO-3 is not supported (the 4-bit base cannot be partitioned); use --strategy fsdp or zero2"
            )
        if self.virtual_stages > 1 and self.pipeline_schedule is not PipelineSchedule.INTERLEAVED:
            raise UserInputError(
                "virtual pipeline stages need the interleaved-1f1b schedule; add --pp-schedule interleaved-1f1b"
            )
        if self.layout.dp is not None:
            raise UserInputError("a training config states the model-parallel split only; dp comes from the cluster")
        return self

    # The layout's degrees, by the names the estimators read them.
    @property
    def tensor_parallel(self) -> int:
        return self.layout.tp

    @property
    def pipeline_parallel(self) -> int:
        return self.layout.pp

    @property
    def virtual_stages(self) -> int:
        return self.layout.virtual_stages

    @property
    def expert_parallel(self) -> int:
        return self.layout.ep

    @property
    def context_parallel(self) -> int:
        return self.layout.cp

    @property
    def model_parallel_size(self) -> int:
        """Ranks that share one data-parallel replica: tp x pp x cp (cp ranks split its sequences)."""
        return self.tensor_parallel * self.pipeline_parallel * self.context_parallel

    def data_parallel_size(self, world_size: int) -> int:
        return world_size // self.model_parallel_size

    def zero_ranks(self, world_size: int) -> int:
        """Ranks our engine's ZeRO reduces gradients over: dp x cp (every cp rank holds the model), over ep when
        experts are split (the expert-data-parallel group, backends/expert_parallel/apply.py)."""
        ranks = self.data_parallel_size(world_size) * self.context_parallel
        return ranks // self.expert_parallel if self.expert_parallel > 1 else ranks

    def with_stage_map(self, model: ModelSpec) -> TrainingConfig:
        """This config with its pipeline stage map written out when the chunks do not divide the layers
        (the default map of planner/contract/layout.py; the engine then runs the same map)."""
        chunks = self.pipeline_parallel * self.virtual_stages
        if chunks == 1 or self.layout.stage_layers is not None or model.num_layers % chunks == 0:
            return self
        if chunks > model.num_layers + 2:
            return self  # check_against says why
        layout = self.layout.model_copy(update={"stage_layers": default_stage_layers(model.num_layers, chunks)})
        return self.model_copy(update={"layout": layout})

    def stage_map(self, model: ModelSpec) -> tuple[int, ...]:
        """Layers of each pipeline chunk (equal when the chunks divide the layers)."""
        chunks = self.pipeline_parallel * self.virtual_stages
        if self.layout.stage_layers is not None:
            return self.layout.stage_layers
        return default_stage_layers(model.num_layers, chunks) if chunks <= model.num_layers + 2 else (1,) * chunks

    def rank_layers(self, model: ModelSpec) -> tuple[int, ...]:
        """Layers on each pipeline rank (its chunks of the stage map together)."""
        return layers_per_rank(self.stage_map(model), self.pipeline_parallel)

    def check_accumulation(self, grad_accum: int) -> None:
        """check_against's part that reads the accumulation: the search checks its candidates' accumulations
        against one check of their layout."""
        pp = self.pipeline_parallel
        if pp > 1 and grad_accum < pp:
            # Every pipeline schedule (GPipe, 1F1B, interleaved) needs a micro-batch per stage in flight.
            raise UserInputError(
                f"--pp {pp} needs at least {pp} micro-batches per step; raise --grad-accum to {pp} or more"
            )
        if pp > 1 and self.pipeline_schedule is PipelineSchedule.INTERLEAVED and grad_accum % pp:
            raise UserInputError(
                f"interleaved 1F1B runs micro-batches in rounds of {pp}; make --grad-accum a multiple of {pp}"
            )

    def _check_context_parallel(self, model: ModelSpec, traced: bool) -> None:
        cp = self.context_parallel
        if self.strategy is not Strategy.ENGINE and not traced:
            raise UserInputError(f"--cp {cp}: context parallelism is our engine's; add --strategy engine")
        if model.family is not ModelFamily.DECODER_ONLY or model.modality != "text":
            raise UserInputError(f"--cp {cp}: context parallelism splits a causal decoder's sequence; "
                                 f"{model.name} is not a text decoder")  # fmt: skip

    def check_against(
        self, model: ModelSpec, world_size: int, gpus_per_node: int, *, traced: bool = False, grad_accum: int = 0
    ) -> None:
        """Raise UserInputError when this layout cannot run this model on this cluster. traced: the estimate
        describes a memory trace (benchmarks/memory/trace_sharding.py records FSDP2 with the engine's cp attention).
        grad_accum: check this accumulation instead of the config's (0: the config's)."""
        tp, pp, cp = self.tensor_parallel, self.pipeline_parallel, self.context_parallel
        if cp > 1:
            self._check_context_parallel(model, traced)
        if world_size % (tp * pp * cp):
            split = f"--tp {tp} x --pp {pp}" + (f" x --cp {cp}" if cp > 1 else "")
            raise UserInputError(f"{split} = {tp * pp * cp} does not divide the {world_size} GPUs")
        # After the GPU count: a --cp that does not divide it is changed first, and the multiple depends on it.
        if cp > 1 and self.seq_len % (2 * cp):
            raise UserInputError(
                f"--cp {cp} splits each sequence into {2 * cp} chunks (two per rank, balancing the causal mask); "
                f"make --seq-len a multiple of {2 * cp}"
            )
        if model.num_heads % tp:
            raise UserInputError(
                f"--tp {tp} does not divide {model.name}'s {model.num_heads} attention heads; "
                f"use a divisor of {model.num_heads}"
            )
        if tp > 1 and model.num_kv_heads % tp and tp % model.num_kv_heads:
            raise UserInputError(f"--tp {tp} cannot split {model.name}'s {model.num_kv_heads} key/value heads evenly")
        if tp > gpus_per_node:
            raise UserInputError(f"--tp {tp} spans nodes; keep tensor parallelism inside a node ({gpus_per_node} GPUs)")
        stage_layers = model.num_decoder_layers or model.num_layers
        stage_map = self.layout.stage_layers
        if pp > 1 and stage_map is not None and sum(stage_map) != model.num_layers:
            raise UserInputError(
                f"--pp-layers {describe_stage_layers(stage_map)} sums to {sum(stage_map)}, but {model.name} has "
                f"{model.num_layers} layers"
            )
        self.check_accumulation(grad_accum or self.grad_accum)
        if pp * self.virtual_stages > stage_layers + 2 and pp > 1 and stage_map is None:
            # Two chunks more than layers leave the embedding and the head a chunk each (default_stage_layers).
            raise UserInputError(
                f"{pp * self.virtual_stages} pipeline chunks exceed {model.name}'s {stage_layers} layers "
                "(plus one chunk each for the embedding and the head)"
            )
        if self.lora_rank > model.hidden_size:  # a rank above the width adds parameters and saves nothing
            raise UserInputError(
                f"--lora-rank {self.lora_rank} is larger than {model.name}'s hidden size {model.hidden_size}; "
                "use a rank well below it (8-64 is usual)"
            )
        if not model.is_moe and not self.routing.is_default:
            raise UserInputError(
                f"--expert-capacity and --expert-imbalance describe a router; {model.name} has no experts"
            )
        if self.expert_parallel > 1:
            if not model.is_moe:
                raise UserInputError(f"--ep {self.expert_parallel}: {model.name} has no experts")
            if model.num_experts % self.expert_parallel:
                raise UserInputError(
                    f"--ep {self.expert_parallel} does not divide {model.name}'s {model.num_experts} experts"
                )
            if self.data_parallel_size(world_size) % self.expert_parallel:
                raise UserInputError("--ep must divide the data-parallel size")
        if self.compression is not GradientCompression.NONE and self.zero_ranks(world_size) == 1:
            raise UserInputError(
                f"--compression {self.compression.value} compresses the data-parallel gradient reduction, and this "
                f"layout has none on {world_size} GPU(s) (one ZeRO rank); drop --compression, or add GPUs"
            )
        if self.kernels is KernelChoice.LIGER and model.model_type not in LIGER_MODEL_TYPES:
            raise UserInputError(
                f"--kernels liger: Liger Kernel has no patch for {model.name}'s model type '{model.model_type}'; "
                "use --kernels compile"
            )
        if self.seq_len > model.max_position_embeddings and model.position_embedding == "learned":
            raise UserInputError(
                f"--seq-len {self.seq_len} exceeds {model.name}'s {model.max_position_embeddings} learned positions; "
                f"pass --seq-len {model.max_position_embeddings} or less"
            )
        if model.image_tokens and self.seq_len <= model.image_tokens:
            raise UserInputError(
                f"--seq-len {self.seq_len} leaves no text after {model.name}'s {model.image_tokens} image tokens; "
                f"give more than {model.image_tokens}"
            )
