"""What the user asks the strategy search for: the batch, the objective, the limits.

The model and the cluster are passed beside it; everything here is about the
training target and how candidates are judged.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from planner.contract.choices import DEFAULT_SEARCHED_CHECKPOINTING, STRATEGY_ALIASES
from planner.errors import UserInputError
from planner.expert_routing import ExpertRouting
from planner.limits import MAX_BATCH, MAX_SEQ_LEN, MAX_TOKENS
from planner.training_config import (
    ActivationCheckpointing,
    AttentionKernel,
    FsdpSharding,
    GradientCompression,
    KernelChoice,
    OptimizerKind,
    Precision,
    Strategy,
)

if TYPE_CHECKING:
    from planner.contract.search_restrictions import SearchRestrictions
    from planner.hardware.gpus import GpuSpec
    from planner.models.spec import ModelSpec

# Chinchilla (Hoffmann et al. 2022): about 20 training tokens per parameter.
CHINCHILLA_TOKENS_PER_PARAM = 20


class Objective(str, Enum):
    # Most tokens per second using every GPU of the cluster.
    THROUGHPUT = "throughput"
    # Fewest dollars to train the token budget; may leave nodes idle if scaling is poor.
    COST = "cost"
    # Shortest wall time to train the token budget; may leave nodes idle if communication dominates.
    TIME_TO_TRAIN = "time-to-train"


class CompressionRequest(str, Enum):
    """Gradient compression for the engine's candidates (planner/search/compression.py, docs/search.md)."""

    NONE = "none"  # no candidate compresses
    INT8 = "int8"  # every candidate is the engine's, with int8 gradients
    ONEBIT = "onebit"  # every candidate is the engine's on ZeRO-0, with 1-bit Adam (its measured loss is warned of)
    AUTO = "auto"  # the engine's candidates also with int8; kept where they score higher (never onebit)

    @property
    def pinned(self) -> GradientCompression | None:
        """The compression every candidate takes (int8, onebit), or None (none, auto)."""
        return GradientCompression(self.value) if self in (CompressionRequest.INT8, CompressionRequest.ONEBIT) else None

    def choices(self, zero_ranks: int) -> tuple[GradientCompression, ...]:
        """The compressions an engine layout over `zero_ranks` ZeRO ranks is searched with; none where it has no
        data-parallel reduction to compress and the request pins one."""
        if self is CompressionRequest.NONE:
            return (GradientCompression.NONE,)
        if self is CompressionRequest.AUTO:
            return (
                (GradientCompression.NONE, GradientCompression.INT8) if zero_ranks > 1 else (GradientCompression.NONE,)
            )
        return (GradientCompression(self.value),) if zero_ranks > 1 else ()


# The strategy names the search takes (planner/contract/choices.py spells them): the four families, and
# DeepSpeed at one ZeRO stage only (the run a team has standardised on, or a test of one stage).
STRATEGY_FAMILIES = ("ddp", "fsdp", "deepspeed", "engine")
SEARCH_STRATEGIES = (
    *STRATEGY_FAMILIES,
    *("zero1", "zero2", "zero3"),
    *("fsdp-full", "fsdp-grad-op", "fsdp-hybrid", "fsdp-no-shard"),
)
# The names that fix an FSDP sharding, and the sharding (as the emitted run folder runs it).
FSDP_SHARDING_KINDS = {
    name: str(STRATEGY_ALIASES[name]["fsdp_sharding"])
    for name in SEARCH_STRATEGIES
    if "fsdp_sharding" in STRATEGY_ALIASES[name]
}
# The names that fix a ZeRO stage, and the stage.
ZERO_STAGE_KINDS = {
    name: int(str(STRATEGY_ALIASES[name]["zero_stage"]))
    for name in SEARCH_STRATEGIES
    if "zero_stage" in STRATEGY_ALIASES[name]
}


def search_strategy_names(names: object, flag: str = "strategies") -> tuple[str, ...]:
    """The names as the search takes them (lower case, each once); one line naming the accepted ones otherwise."""
    if isinstance(names, str):
        names = (names,)
    if not isinstance(names, (list, tuple)):
        raise UserInputError(f"{flag} is a list of strategy names from {'|'.join(SEARCH_STRATEGIES)}")
    chosen = []
    for name in names:
        key = str(name.value if isinstance(name, Enum) else name).strip().lower()
        if key not in SEARCH_STRATEGIES:
            raise UserInputError(f"{flag} must be one of {'|'.join(SEARCH_STRATEGIES)}, not '{name}'")
        chosen.append(key)
    return tuple(dict.fromkeys(chosen))


def pin_fsdp_sharding(names: tuple[str, ...], sharding: FsdpSharding, flag: str = "--fsdp-sharding") -> tuple[str, ...]:
    """The search's strategy names with FSDP pinned to `sharding`, as `fsdp-full` (say) pins it: `fsdp` becomes
    that name. Any other kind beside it, or another sharding pinned already, is one line naming the conflict."""
    pinned = next(name for name, value in FSDP_SHARDING_KINDS.items() if value == sharding.value)
    others = [name for name in names if name != "fsdp" and name not in FSDP_SHARDING_KINDS]
    if others:
        raise UserInputError(
            f"{flag} {sharding.value} pins FSDP's sharding, but --strategies also searches {', '.join(others)}: "
            f"use --strategies fsdp (or {pinned}), or drop {flag}"
        )
    clashing = [name for name in names if name in FSDP_SHARDING_KINDS and name != pinned]
    if clashing:
        raise UserInputError(f"{flag} {sharding.value} conflicts with --strategies {', '.join(clashing)}; keep one")
    return (pinned,)


class PlanRequest(BaseModel):
    """The training target. Unset fields are chosen by the search."""

    model_config = ConfigDict(frozen=True)

    seq_len: int = Field(default=2048, ge=1, le=MAX_SEQ_LEN)
    # Sequences per optimizer step; when set, micro x accum x dp must equal it.
    global_batch: int | None = Field(default=None, ge=1, le=MAX_BATCH)
    # Sequences per GPU per micro-step; when unset the search picks it.
    micro_batch: int | None = Field(default=None, ge=1, le=MAX_BATCH)
    max_micro_batch: int = Field(default=64, ge=1)
    # None: bf16-mixed where the GPU has bf16, else fp16-mixed, else fp32.
    precision: Precision | None = None
    optimizer: OptimizerKind = OptimizerKind.ADAMW
    attention: AttentionKernel = AttentionKernel.SDPA
    activation_checkpointing: tuple[ActivationCheckpointing, ...] = DEFAULT_SEARCHED_CHECKPOINTING
    strategies: tuple[str, ...] = STRATEGY_FAMILIES  # names from SEARCH_STRATEGIES
    # Whose training code the speed is predicted for (planner/throughput/implementation.py); "ours" is what
    # --emit writes.
    implementation: str = "ours"
    allow_offload: bool = True
    lora_rank: int = Field(default=0, ge=0)
    qlora: bool = False
    fp8: bool = False  # FP8 block matmuls in every candidate (planned only; bf16-mixed, FP8 GPUs)
    kernels: KernelChoice = KernelChoice.EAGER  # the blocks' element-wise kernels, for every candidate
    routing: ExpertRouting = ExpertRouting()  # MoE router imbalance and the engine's capacity factor
    compression: CompressionRequest = CompressionRequest.NONE  # the engine's data-parallel gradients
    zeropp: bool = False  # also search DeepSpeed's ZeRO++ on ZeRO-3 (planner/throughput/zeropp.py)
    objective: Objective = Objective.THROUGHPUT
    top_k: int = Field(default=5, ge=1)
    headroom_fraction: float = Field(default=0.1, ge=0.0, lt=1.0, allow_inf_nan=False)
    # Token budget for time-to-train and cost; None = 20 tokens per parameter (Chinchilla).
    train_tokens: float | None = Field(default=None, gt=0, le=MAX_TOKENS, allow_inf_nan=False)

    @field_validator("strategies", mode="before")
    @classmethod
    def _strategy_names(cls, value: object) -> tuple[str, ...]:
        return search_strategy_names(value)

    @model_validator(mode="after")
    def _check(self) -> PlanRequest:
        if self.micro_batch is not None and self.global_batch is not None and self.global_batch % self.micro_batch:
            raise UserInputError(
                f"--global-batch {self.global_batch} is not a multiple of --micro-batch {self.micro_batch}; make it "
                f"one, or pick a --micro-batch that divides {self.global_batch}"
            )
        if not self.strategies:
            raise UserInputError("no strategy left to search; allow at least one of ddp, fsdp, deepspeed, engine")
        if not self.activation_checkpointing:
            raise UserInputError("allow at least one activation checkpointing mode: none, selective, op or full")
        if self.zeropp and self.precision not in (None, Precision.FP16_MIXED):
            raise UserInputError(
                f"--zeropp with --precision {self.precision.value}: ZeRO++'s int4 gradient kernel reads fp16, so it is "
                "planned in fp16-mixed; drop --precision (ZeRO++ takes fp16-mixed, the others the GPU's best), or "
                "drop --zeropp"
            )
        if self.zeropp and not any(name in ("deepspeed", "zero3") for name in self.strategies):
            raise UserInputError(
                f"--zeropp plans DeepSpeed's ZeRO++ on ZeRO-3, and --strategies searches {','.join(self.strategies)}: "
                "add zero3 (or deepspeed) to --strategies, or drop --zeropp"
            )
        if self.compression.pinned is not None and self.strategies != ("engine",):
            raise UserInputError(
                f"--compression {self.compression.value} compresses our engine's data-parallel gradients, which only "
                f"the engine runs, and --strategies searches {','.join(self.strategies)}: use --strategies engine, "
                "or --compression auto to try int8 beside the others"
            )
        return self

    def routing_for(self, strategy: Strategy) -> ExpertRouting:
        """The routing a candidate of this strategy runs: only our engine's dispatch has a capacity."""
        if strategy is Strategy.ENGINE or not self.routing.capacity_factor:
            return self.routing
        return self.routing.model_copy(update={"capacity_factor": 0.0})

    def tokens_to_train(self, total_params: int) -> float:
        return self.train_tokens if self.train_tokens is not None else CHINCHILLA_TOKENS_PER_PARAM * total_params


DEFAULT_SEQ_LEN = 2048


def default_seq_len(spec: ModelSpec) -> int:
    """The smaller of 2048 and the model's context. Here, not in the selector that uses it too: `plan` needs
    it, and importing planner.selector loads the serving planner and the legacy API with it."""
    return min(DEFAULT_SEQ_LEN, spec.max_position_embeddings)


def training_precision(gpu: GpuSpec, requested: Precision | None) -> Precision:
    """The precision a training run on `gpu` computes in: the one asked for, if the GPU has its matmuls (else the
    one line naming what it has), or the best mixed precision the GPU has. bf16-mixed and fp16-mixed cost the same
    memory and time; bf16 needs no loss scaling, so it is preferred where the hardware supports it. `plan` and
    `estimate` both take their precision from here, so the two never disagree on a GPU without bf16."""
    if requested is not None:
        gpu.peak_tflops(requested.compute_dtype)  # one line, "V100-32GB has no bf16 support; use fp16-mixed"
        return requested
    if gpu.supports("bf16"):
        return Precision.BF16_MIXED
    if gpu.supports("fp16"):
        return Precision.FP16_MIXED
    return Precision.FP32


def search_restrictions(request: PlanRequest) -> SearchRestrictions:
    """What `request` kept the search to, as a run folder's plan.json records it (the run block's `search`)."""
    from planner.contract.search_restrictions import SearchRestrictions

    return SearchRestrictions(
        strategies=request.strategies,
        activation_checkpointing=request.activation_checkpointing,
        allow_offload=request.allow_offload,
        micro_batch=request.micro_batch,
        objective=request.objective.value,
        train_tokens=request.train_tokens,
    )


def restricted_fields(restrictions: SearchRestrictions) -> dict[str, object]:
    """A PlanRequest's fields for a recorded search's restrictions (`tune RUN_DIR` re-runs the plan's own search)."""
    return {
        "strategies": restrictions.strategies,
        "activation_checkpointing": restrictions.activation_checkpointing,
        "allow_offload": restrictions.allow_offload,
        "micro_batch": restrictions.micro_batch,
        "objective": Objective(restrictions.objective),
        "train_tokens": restrictions.train_tokens,
    }
