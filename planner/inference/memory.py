"""Memory on one GPU of a serving replica: weights, KV cache, one prefill chunk's activations, runtime overhead.

The formulas, with tp the tensor-parallel and pp the pipeline-parallel degree
(docs/inference.md; tests/test_inference_memory.py checks the weights and the
KV cache against the tensors of the real transformers model):
- weights: the blocks' parameters at the format's bits per weight, split over
  tp, a stage holding ceil(layers/pp) of the layers; the embedding and LM head
  in 16 bits, split over tp (vocab-parallel). With pp > 1 the first stage holds
  the input embedding and the last the head (both, when they are tied).
- KV cache: 2 (K and V) x ceil(layers/pp) x ceil(kv_heads/tp) x head_dim x
  bytes per token, each request's context + output rounded up to whole paged
  blocks, x batch. When tp exceeds the KV heads, each GPU keeps a copy of one.
  A sliding-window or chunked-attention layer keeps its window's blocks and
  the one being filled (planner/models/attention_window.py: Gemma 2 and 3,
  gpt-oss, Llama 4, Mistral-7B, Phi-3), and a decode step reads its window.
- activations: nothing is kept for a backward pass, so the peak is one layer's
  transient tensors while a prefill chunk of T = min(batch x context, chunk)
  tokens passes: the residual stream in and out, plus the wider of the
  attention's (fused q/k/v and its output) and the MLP's (up, gate and their
  product) intermediates, plus fp32 logits for the one token per request that
  is sampled.
- overhead: CUDA context and a fragmentation share, as the training estimate
  (planner/memory/estimate.py, OverheadSettings).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.inference.request import InferenceRequest
from planner.memory.estimate import DEFAULT_OVERHEAD, OverheadSettings
from planner.models.attention_window import attended_tokens
from planner.models.flops import model_shape
from planner.models.spec import MlpKind, ModelSpec

ACTIVATION_BYTES = 2  # activations stay in 16 bits, whatever the weight format
LOGIT_BYTES = 4  # samplers take fp32 logits

SOURCES = {
    "weights": "formula: parameters (exact count) x bits per weight / tp, per pipeline stage",
    "kv_cache": "formula: 2 x layers x kv_heads x head_dim x bytes x tokens, paged blocks; sliding-window and chunked "
    "layers keep their window (transformers' layer types)",
    "activations": "formula: one layer's transients for one prefill chunk + sampled logits",
    "overhead": "assumption: CUDA context + fragmentation share (planner/memory/estimate.py)",
}


@dataclass(frozen=True)
class ServingMemory:
    weights: int
    kv_cache: int
    activations: int
    overhead: int
    capacity: int
    usable: int
    kv_bytes_per_request: int
    max_batch: int  # requests of this length whose KV cache fits beside the rest

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.activations + self.overhead

    @property
    def fits(self) -> bool:
        return self.total <= self.usable and self.max_batch >= 1

    def breakdown(self) -> dict[str, int]:
        return {
            "weights": self.weights,
            "kv_cache": self.kv_cache,
            "activations": self.activations,
            "overhead": self.overhead,
            "total": self.total,
        }


def weight_bytes(spec: ModelSpec, request: InferenceRequest, tp: int, pp: int) -> int:
    embedding = spec.params.embedding
    blocks = spec.params.total - embedding
    stage_share = math.ceil(spec.num_layers / pp) / spec.num_layers
    block_bytes = blocks * stage_share * request.weights.bits / 8 / tp
    stage_embedding = embedding if pp == 1 or spec.tied_embeddings else embedding / 2
    return int(block_bytes + stage_embedding * 2 / tp)


def lookup_table_bytes(spec: ModelSpec, tp: int, pp: int) -> int:
    """Of weight_bytes x pp, the input token table a step only looks rows up in: an untied model's own table, and a
    tied one's first-stage copy under pipelining; the head that reads the whole table each step is not in it."""
    if spec.tied_embeddings:
        return int(spec.params.embedding * 2 / tp) if pp > 1 else 0  # weight_bytes holds it on every stage
    return int((spec.params.embedding - model_shape(spec).head_params) * 2 / tp)


def kv_bytes_per_layer_token(spec: ModelSpec, request: InferenceRequest, tp: int) -> int:
    """One token's keys and values in one layer, on one tensor-parallel rank."""
    if spec.is_mla:
        # Latent attention caches the compressed latent and the shared rotary key, not per-head keys and
        # values (vLLM's and SGLang's MLA caches); every tensor-parallel rank keeps the whole latent.
        return (spec.kv_lora_rank + spec.qk_rope_head_dim) * request.kv_cache.bytes
    return 2 * math.ceil(spec.num_kv_heads / tp) * spec.head_dim * request.kv_cache.bytes


def kv_bytes_per_token(spec: ModelSpec, request: InferenceRequest, tp: int, pp: int) -> int:
    """One token's keys and values in every layer of the busiest pipeline stage (windows aside)."""
    return math.ceil(spec.num_layers / pp) * kv_bytes_per_layer_token(spec, request, tp)


def stage_layers(spec: ModelSpec, pp: int) -> tuple[int, int]:
    """(full-attention, windowed) layers of the stage holding the most full ones: the busiest stage's KV cache.
    The windowed models space their full layers evenly (attention_window.py), so a stage of S layers holds at most
    one more than its share of them."""
    layers = math.ceil(spec.num_layers / pp)
    all_full = spec.num_layers - spec.windowed_layers
    if pp == 1 or not all_full or not spec.windowed_layers:
        return min(layers, all_full), layers - min(layers, all_full)
    full = min(layers, math.ceil(layers * all_full / spec.num_layers) + 1)
    return full, layers - full


def kv_bytes_per_request(spec: ModelSpec, request: InferenceRequest, tp: int, pp: int) -> int:
    """One request's cache on the busiest stage, in whole paged blocks; a windowed layer keeps the window's last
    window - 1 tokens (the next one attends to them and itself: transformers' sliding-window cache layer keeps as
    many), in the blocks they straddle (planner/models/attention_window.py)."""
    block = request.block_tokens
    held = math.ceil(request.tokens_per_request / block) * block
    full, windowed = stage_layers(spec, pp)
    straddle = 1 if block > 1 else 0
    window_held = min(held, (math.ceil((spec.attention_window - 1) / block) + straddle) * block)
    return (full * held + windowed * window_held) * kv_bytes_per_layer_token(spec, request, tp)


def kv_read_bytes_per_request(spec: ModelSpec, request: InferenceRequest, tp: int, length: float) -> float:
    """What one decode step reads of one request's cache over every layer, at `length` tokens: a windowed layer
    reads its window alone, a chunked one the part of its chunk so far (half of it on average)."""
    return attended_tokens(spec, length) * kv_bytes_per_layer_token(spec, request, tp)


def activation_bytes(spec: ModelSpec, request: InferenceRequest, tp: int, batch: int | None = None) -> int:
    """Peak transients with `batch` requests running (default: the request's batch)."""
    batch = request.batch if batch is None else batch
    tokens = min(batch * request.context, request.prefill_chunk)
    hidden, query = spec.hidden_size, spec.num_heads * spec.head_dim
    attention = (2 * query + 2 * spec.kv_size) / tp  # fused q/k/v, then the attention output
    ffn = spec.expert_ffn_size if spec.is_moe and spec.expert_ffn_size else spec.ffn_size
    routed = spec.experts_per_token if spec.is_moe else 1
    mlp = ffn * routed * (3 if spec.mlp_kind is MlpKind.GATED else 2) / tp
    per_token = (2 * hidden + max(attention, mlp)) * ACTIVATION_BYTES
    logits = batch * spec.vocab_size / tp * LOGIT_BYTES
    return int(tokens * per_token + logits)


def serving_memory(
    spec: ModelSpec,
    request: InferenceRequest,
    capacity: int,
    tp: int,
    pp: int,
    overhead: OverheadSettings = DEFAULT_OVERHEAD,
) -> ServingMemory:
    weights = weight_bytes(spec, request, tp, pp)
    per_request = kv_bytes_per_request(spec, request, tp, pp)
    activations = activation_bytes(spec, request, tp)
    kv_cache = per_request * request.batch
    tensors = weights + kv_cache + activations
    overhead_bytes = int(overhead.cuda_context_bytes + overhead.fragmentation_fraction * tensors)
    usable = int(capacity * (1 - request.headroom_fraction))
    budget = (usable - overhead.cuda_context_bytes) / (1 + overhead.fragmentation_fraction)  # for the tensors
    return ServingMemory(
        weights=weights,
        kv_cache=kv_cache,
        activations=activations,
        overhead=overhead_bytes,
        capacity=capacity,
        usable=usable,
        kv_bytes_per_request=per_request,
        max_batch=max_concurrent(spec, request, tp, budget - weights, per_request),
    )


def max_concurrent(spec: ModelSpec, request: InferenceRequest, tp: int, room: float, per_request: int) -> int:
    """The most requests n whose KV cache and the activations of n running requests fit in `room` bytes.

    One number for the table's "max batch", the regime and the reasons: the activations (a prefill chunk and
    each running request's logits) grow with n, so n is found for its own activations, not for those of the
    batch asked (which put 413 in one place and 415 in another for 1000 requests on one H100)."""

    def fits(n: int) -> bool:
        return n * per_request + activation_bytes(spec, request, tp, batch=n) <= room

    low, high = 0, max(int(room // per_request), 0)  # fits(low); above high the KV cache alone does not fit
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low
