"""What a serving plan is asked for: the traffic (batch x context), the weight and KV formats.

Bits per weight include what a quantized checkpoint stores beside the
weights (docs/inference.md):
- bf16 / fp16: 16;
- fp8 (E4M3, per-tensor scale, as vLLM and TensorRT-LLM serve it): 8;
- int8 (weight-only, one fp16 scale per output channel): 8 + a negligible share;
- int4 (GPTQ / AWQ, group size 128: an fp16 scale and a 4-bit zero per group): 4 + 20/128.
Embeddings and the LM head stay in 16 bits under every format, as those
quantizers leave them.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from planner.models.spec import ModelSpec

from planner.errors import refuse_unknown_keywords
from planner.limits import MAX_BATCH, MAX_SEQ_LEN


class WeightFormat(str, Enum):
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"

    @property
    def bits(self) -> float:
        return {"bf16": 16.0, "fp16": 16.0, "fp8": 8.0, "int8": 8.0, "int4": 4.0 + 20 / 128}[self.value]

    @property
    def compute_dtype(self) -> str:
        """The dtype the matmuls run in: fp8 checkpoints compute in fp8; weight-only int8/int4 dequantize to 16 bits."""
        return "fp8" if self is WeightFormat.FP8 else "fp16" if self is WeightFormat.FP16 else "bf16"


class KvFormat(str, Enum):
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"

    @property
    def bytes(self) -> int:
        return 1 if self is KvFormat.FP8 else 2


class Batching(str, Enum):
    CONTINUOUS = "continuous"  # requests enter and leave the running batch every step (vLLM, TensorRT-LLM, TurboMind)
    STATIC = "static"  # the whole batch is prefilled, then decoded together


class ServingObjective(str, Enum):
    THROUGHPUT = "throughput"  # most generated tokens/s over the whole cluster
    LATENCY = "latency"  # the shortest time between tokens for one request


# Generated tokens per request when none are asked for, and the prompt (docs/inference.md).
DEFAULT_OUTPUT_TOKENS = 256
DEFAULT_CONTEXT_TOKENS = 2048
# vLLM's default KV block (tokens per page).
PAGED_BLOCK_TOKENS = 16
# Tokens one prefill step processes at most (vLLM's chunked prefill budget, max_num_batched_tokens).
PREFILL_CHUNK_TOKENS = 8192


class InferenceRequest(BaseModel):
    """Serve `batch` concurrent requests (over all replicas) of `context` prompt tokens, generating `output` each.

    `batch` is the number of concurrent clients, each sending its next request when its last one ends."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # __init__ names the field a stray key meant

    context: int = Field(default=DEFAULT_CONTEXT_TOKENS, ge=1, le=MAX_SEQ_LEN)  # prompt tokens per request
    output: int = Field(default=DEFAULT_OUTPUT_TOKENS, ge=1, le=MAX_SEQ_LEN)  # generated tokens per request
    # True when `output` is the default, not asked for: a default shortened to fit the context is said, and a
    # prompt that leaves no room is refused naming the default (search.py); not part of the answer's JSON.
    output_defaulted: bool = Field(default=False, exclude=True)
    # True when `context` is the default cut to half a short model's context (said in the answer's notes).
    context_shortened: bool = Field(default=False, exclude=True)
    batch: int = Field(default=1, ge=1, le=MAX_BATCH)  # concurrent requests, spread over the replicas
    # Serve at this tensor-parallel degree only (vLLM's --tensor-parallel-size); None: every one a node allows.
    tensor_parallel: int | None = Field(default=None, ge=1)
    weights: WeightFormat = WeightFormat.BF16
    kv_cache: KvFormat = KvFormat.BF16
    block_tokens: int = Field(default=PAGED_BLOCK_TOKENS, ge=1)
    prefill_chunk: int = Field(default=PREFILL_CHUNK_TOKENS, ge=1)
    batching: Batching = Batching.CONTINUOUS
    objective: ServingObjective = ServingObjective.THROUGHPUT
    headroom_fraction: float = Field(default=0.1, ge=0.0, lt=1.0, allow_inf_nan=False)
    top_k: int = Field(default=5, ge=1)

    def __init__(self, **data: Any) -> None:
        """`InferenceRequest(prompt_tokens=...)` is refused in one line naming the field, not served at the default
        prompt (checked before pydantic's validation, so not wrapped in a ValidationError)."""
        refuse_unknown_keywords("InferenceRequest", data, list(type(self).model_fields))
        super().__init__(**data)

    @property
    def tokens_per_request(self) -> int:
        return self.context + self.output

    @classmethod
    def for_model(
        cls, spec: ModelSpec, *, batch: int = 1, context: int | None = None, output: int | None = None, **fields: Any
    ) -> InferenceRequest:
        """A request with the defaults the CLI and the selector share: a prompt of the smaller of 2048 and half
        the model's context, and 256 generated tokens, shortened to what the context leaves after the prompt
        (the plan's notes say both; a prompt that leaves none keeps 256, which check_servable refuses). A model
        whose length nothing caps (ALiBi, no positions) takes any prompt and output it is given; its defaults still
        come from the length it states (its training context)."""
        stated = spec.max_position_embeddings
        chosen = context or min(DEFAULT_CONTEXT_TOKENS, stated // 2)
        room = stated - chosen if spec.length_limit is not None else DEFAULT_OUTPUT_TOKENS  # uncapped: never shortened
        generated = output or (min(DEFAULT_OUTPUT_TOKENS, room) if room >= 1 else DEFAULT_OUTPUT_TOKENS)
        shortened = context is None and chosen < DEFAULT_CONTEXT_TOKENS
        return cls(context=chosen, output=generated, batch=batch, output_defaulted=output is None,
                   context_shortened=shortened, **fields)  # fmt: skip
