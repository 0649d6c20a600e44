"""The named choices a training run makes: strategy, FSDP sharding, offload, kernels, precision, optimizer,
activation checkpointing, attention kernel, pipeline schedule and gradient compression.

They are contract values: plan.json, engine.json and the run block carry them, so they live at the floor of
the planner (docs/architecture.md, "Floors") and import nothing of it. `planner/training_config.py` combines
them into a TrainingConfig.
"""

from __future__ import annotations

from enum import Enum


class Strategy(str, Enum):
    DDP = "ddp"
    FSDP = "fsdp"
    DEEPSPEED = "deepspeed"  # DeepSpeed ZeRO, stage in zero_stage
    ENGINE = "engine"  # our engine: TP x PP x DP with a ZeRO stage on DP

    @property
    def display_name(self) -> str:
        """How the selector's answers and docs write it (docs/selector.md)."""
        return {"ddp": "DDP", "fsdp": "FSDP", "deepspeed": "DeepSpeed", "engine": "engine"}[self.value]


# Every name a strategy is given by a user, in any door (CLI flags, the selector, the benchmark matrix), and the
# TrainingConfig fields it fixes. The one place strategy spellings live: `strategy_named` reads them.
STRATEGY_ALIASES: dict[str, dict[str, object]] = {
    "ddp": {"strategy": Strategy.DDP},
    "fsdp": {"strategy": Strategy.FSDP},
    "fsdp-full": {"strategy": Strategy.FSDP, "fsdp_sharding": "full"},
    "fsdp-grad-op": {"strategy": Strategy.FSDP, "fsdp_sharding": "grad-op"},
    "fsdp-hybrid": {"strategy": Strategy.FSDP, "fsdp_sharding": "hybrid"},
    "fsdp-no-shard": {"strategy": Strategy.FSDP, "fsdp_sharding": "none"},
    "deepspeed": {"strategy": Strategy.DEEPSPEED},
    "zero0": {"strategy": Strategy.DEEPSPEED, "zero_stage": 0},
    "zero1": {"strategy": Strategy.DEEPSPEED, "zero_stage": 1},
    "zero2": {"strategy": Strategy.DEEPSPEED, "zero_stage": 2},
    "zero3": {"strategy": Strategy.DEEPSPEED, "zero_stage": 3},
    "engine": {"strategy": Strategy.ENGINE},
}


def strategy_named(name: str, allowed: tuple[str, ...] | None = None) -> dict[str, object]:
    """The TrainingConfig fields a strategy name fixes (any case, the display names too); ValueError naming the
    accepted names otherwise. `allowed` narrows the names a door accepts."""
    names = allowed or tuple(STRATEGY_ALIASES)
    key = str(name).strip().lower()
    if key not in names:
        raise ValueError(f"'{name}' is not one of {'|'.join(names)}")
    return STRATEGY_ALIASES[key]


class FsdpSharding(str, Enum):
    FULL = "full"  # FULL_SHARD: params, grads and optimizer states sharded
    GRAD_OP = "grad-op"  # SHARD_GRAD_OP: params stay gathered from forward to backward
    HYBRID = "hybrid"  # HYBRID_SHARD: full shard inside a node, replicate across nodes
    NONE = "none"  # NO_SHARD: DDP semantics

    @classmethod
    def _missing_(cls, value: object) -> FsdpSharding | None:
        """ "no-shard", as plan tables print NO_SHARD, names it too."""
        return cls.NONE if value == "no-shard" else None

    @property
    def fsdp2(self) -> bool:
        """Whether FSDP2's fully_shard expresses it; hybrid and none are emitted as FSDP1 (planner/emit)."""
        return self in (FsdpSharding.FULL, FsdpSharding.GRAD_OP)


class Offload(str, Enum):
    NONE = "none"
    CPU = "cpu"
    NVME = "nvme"


class KernelChoice(str, Enum):
    """Which kernels run the blocks' element-wise work (docs/search.md, "Kernels")."""

    EAGER = "eager"  # transformers modules as they are: RMSNorm and rotary as chains of small kernels
    COMPILE = "compile"  # torch.compile of each block: inductor fuses those chains
    LIGER = "liger"  # Liger kernels: fused RMSNorm, rotary, SwiGLU and a chunked linear cross-entropy


# Model types Liger Kernel patches (liger_kernel.transformers); others refuse --kernels liger in one line.
LIGER_MODEL_TYPES = frozenset(
    {"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3"}
)


class GradientCompression(str, Enum):
    """How our engine's data-parallel gradient reductions travel (docs/parallelism.md, "Gradient compression"):
    engine.json's `hardware_selector.compression` values that a plan chooses (backends/parts/compression.py)."""

    NONE = "none"  # the gradients as they are, in the compute dtype
    INT8 = "int8"  # 1 byte per element and a fp32 scale per 128, with error feedback
    ONEBIT = "onebit"  # 1 bit (the sign) per element and a fp32 scale per 128, with error feedback


class Precision(str, Enum):
    FP32 = "fp32"
    FP16_MIXED = "fp16-mixed"
    BF16_MIXED = "bf16-mixed"
    BF16 = "bf16"  # pure bf16: weights, grads and optimizer states all in bf16

    @property
    def is_mixed(self) -> bool:
        return self in (Precision.FP16_MIXED, Precision.BF16_MIXED)

    @property
    def compute_dtype(self) -> str:
        return {"fp32": "fp32", "fp16-mixed": "fp16", "bf16-mixed": "bf16", "bf16": "bf16"}[self.value]


class OptimizerKind(str, Enum):
    ADAMW = "adamw"
    ADAMW_8BIT = "adamw-8bit"
    ADAFACTOR = "adafactor"
    SGD = "sgd"  # with momentum
    LION = "lion"


class ActivationCheckpointing(str, Enum):
    NONE = "none"
    SELECTIVE = "selective"  # recompute attention's core (Korthikanti et al.)
    # keep every second matmul output and the attention kernel's, recompute the rest (torchtitan's "op";
    # planner/memory/op_checkpointing.py). Searched only when asked for (--ac ...,op): DEFAULT_SEARCHED.
    OP = "op"
    FULL = "full"  # keep only each block's input, recompute the block


# What the search tries unless --ac says otherwise: op-level checkpointing runs on our backends but not through
# the HF Trainer or accelerate (whose checkpointing is whole blocks), so it is an opt-in.
DEFAULT_SEARCHED_CHECKPOINTING = (
    ActivationCheckpointing.NONE,
    ActivationCheckpointing.SELECTIVE,
    ActivationCheckpointing.FULL,
)


class AttentionKernel(str, Enum):
    SDPA = "sdpa"  # flash / memory-efficient: no s x s tensor is kept
    EAGER = "eager"  # materialises the s x s attention probabilities


class PipelineSchedule(str, Enum):
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved-1f1b"
