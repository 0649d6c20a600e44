"""Time to first token, time between tokens and tokens/s of one serving replica: a roofline.

(docs/inference.md; validated in docs/accuracy.md, "Serving".)
- Prefill (compute-bound): the batch's prompts, batch x context tokens, cost
  2 x (active block weights + the head for the one sampled token) FLOPs per
  token plus the causal attention core, 2 x layers x heads x head_dim x
  context^2 per request. Time = max(FLOPs / (tp x peak x matmul share),
  weight bytes / HBM bandwidth) per pipeline stage; one prefill passes the
  stages one after another, so pp does not shorten it. Each layer all-reduces
  its output twice over tp.
- Decode (bound by memory bandwidth): each step reads the replica's weights (for
  a mixture of experts, the experts the batch's tokens are routed to) and the
  KV cache of every request at its mean length, context + output/2. Time per
  step = max(bytes / (HBM bandwidth x efficiency), FLOPs / peak) per stage, the
  stages summed, + 2 all-reduces per layer (latency-bound at these sizes) + a
  fixed per-step cost of the serving engine.
- Reported: TTFT (the batch's prefill), ITL (one decode step), decode tokens/s
  = batch / ITL, and tokens/s over a whole request (prefill included).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.hardware.cluster import ClusterSpec
from planner.inference.memory import kv_bytes_per_token, weight_bytes
from planner.inference.request import InferenceRequest
from planner.models.flops import model_shape
from planner.models.spec import ModelSpec
from planner.throughput.collectives import all_reduce_s, cluster_links, point_to_point_s, process_group
from planner.throughput.constants import ARCHITECTURE_EFFICIENCY, CONSTANTS

# ASSUMED: share of the HBM bandwidth a decode step's weight and KV reads reach
# (vLLM and TensorRT-LLM report 70-85% "model bandwidth utilisation" on large
# models; docs/accuracy.md compares against measured figures).
HBM_EFFICIENCY = 0.8
# ASSUMED: the serving engine's own time per decode step with CUDA graphs
# (scheduling, sampling, kernel launches not hidden by the graph).
STEP_OVERHEAD_S = 0.5e-3
SOURCE = (
    "roofline: prefill FLOPs / (peak x matmul share), decode bytes / (HBM bandwidth x "
    f"{HBM_EFFICIENCY:.0%}) + all-reduce latency + {STEP_OVERHEAD_S * 1e3:g} ms per step (assumed)"
)


@dataclass(frozen=True)
class ServingSpeed:
    ttft_s: float
    itl_s: float
    decode_tokens_per_s: float  # batch / ITL
    request_tokens_per_s: float  # generated tokens over whole requests, prefill included
    prefill_bound: str  # "compute" or "memory"
    decode_bound: str


def _matmul_rate(cluster: ClusterSpec, dtype: str) -> float:
    if dtype == "bf16" and not cluster.gpu.supports("bf16"):
        dtype = "fp16"  # weight-only formats dequantize to the GPU's own 16-bit type
    share = ARCHITECTURE_EFFICIENCY.get(cluster.gpu.architecture, (1.0, 1.0))[0]
    return cluster.gpu.peak_tflops(dtype) * 1e12 * CONSTANTS.matmul_peak_fraction * share


def _moe_read_share(spec: ModelSpec, tokens: int) -> float:
    """Expected share of one layer's experts that `tokens` routed tokens touch."""
    if not spec.is_moe:
        return 1.0
    return 1.0 - (1.0 - spec.experts_per_token / spec.num_experts) ** tokens


def serving_speed(spec: ModelSpec, request: InferenceRequest, cluster: ClusterSpec, tp: int, pp: int) -> ServingSpeed:
    shape = model_shape(spec)
    rate = _matmul_rate(cluster, request.weights.compute_dtype)
    bandwidth = cluster.gpu.memory_bandwidth_GBps * 1e9 * HBM_EFFICIENCY
    links = cluster_links(cluster, CONSTANTS.link_efficiency)
    group = process_group(tp, 1, cluster.gpus_per_node)
    layers = spec.num_layers
    stage_weights = weight_bytes(spec, request, tp, pp)
    hop = point_to_point_s(links, 0.0, crosses_nodes=tp * pp > cluster.gpus_per_node) if pp > 1 else 0.0

    # Prefill: every prompt of the batch, in chunks of the engine's token budget.
    prompt_tokens = request.batch * request.context
    matmul = 2 * (shape.block_matmul_params_per_token * prompt_tokens + shape.head_params * request.batch)
    attention = 2 * layers * shape.query_width * request.context**2 * request.batch
    compute_s = (matmul + attention) / (tp * rate)
    chunks = math.ceil(prompt_tokens / request.prefill_chunk)
    weight_reads_s = chunks * stage_weights * pp / bandwidth
    chunk_bytes = min(prompt_tokens, request.prefill_chunk) * spec.hidden_size * 2
    prefill_comm = chunks * 2 * layers * all_reduce_s(links, group, chunk_bytes) if tp > 1 else 0.0
    ttft = max(compute_s, weight_reads_s) + prefill_comm + chunks * (pp - 1) * hop

    # Decode: one token per request per step.
    mean_length = request.context + request.output / 2
    expert_bytes = shape.expert_params * request.weights.bits / 8 / tp
    read_weights = stage_weights * pp - expert_bytes * (1 - _moe_read_share(spec, request.batch))
    kv = kv_bytes_per_token(spec, request, tp, pp) * pp * mean_length * request.batch
    memory_s = (read_weights + kv) / bandwidth
    flops = 2 * request.batch * (shape.block_matmul_params_per_token + shape.head_params)
    flops += 4 * layers * shape.query_width * mean_length * request.batch
    decode_compute_s = flops / (tp * rate)
    step_bytes = request.batch * spec.hidden_size * 2
    decode_comm = 2 * layers * all_reduce_s(links, group, step_bytes) if tp > 1 else 0.0
    itl = max(memory_s, decode_compute_s) + decode_comm + (pp - 1) * hop + STEP_OVERHEAD_S

    whole_request = ttft + (request.output - 1) * itl
    return ServingSpeed(
        ttft_s=ttft,
        itl_s=itl,
        decode_tokens_per_s=request.batch / itl,
        request_tokens_per_s=request.batch * request.output / whole_request,
        prefill_bound="compute" if compute_s >= weight_reads_s else "memory",
        decode_bound="memory" if memory_s >= decode_compute_s else "compute",
    )
