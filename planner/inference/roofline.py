"""The cost of one serving-engine step on a replica: a prefill of some prompts, or a (mixed) decode step.

(docs/inference.md, "Speed"; compared with published measurements in docs/accuracy.md.)
- Prefill (compute-bound): the prompts' tokens cost 2 x (active block weights +
  the head for the one sampled token) FLOPs per token plus the causal attention
  core, 2 x layers x heads x head_dim x context^2 per prompt. Time =
  max(FLOPs / (tp x peak x PREFILL_PEAK_FRACTION), weight bytes / HBM bandwidth
  per chunk of the engine's token budget); one prefill passes the pipeline
  stages one after another, so pp does not shorten it. Each layer all-reduces
  its output twice over tp.
- Decode step (bound by memory bandwidth): reads the replica's weights (for a
  mixture of experts, the experts the batch's tokens reach) and the KV cache
  of every running request at its mean length, context + output/2, at
  HBM_EFFICIENCY of the bandwidth, or the decode tokens' FLOPs if those take
  longer. Under continuous batching the step also carries chunks of other
  requests' prompts (`prefill_tokens`); their compute time is added to the
  step rather than hidden under its weight reads (the engines run the
  prompts' attention separately and a chunk of a few hundred tokens is far
  from the GEMMs' best efficiency; the published ITLs under load grow by
  about the prompts' compute time, docs/accuracy.md). Plus 2 all-reduces per
  layer over tp and a fixed per-step cost of the engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.hardware.cluster import ClusterSpec
from planner.inference.memory import kv_read_bytes_per_request, lookup_table_bytes, weight_bytes
from planner.inference.request import InferenceRequest
from planner.models.attention_window import attended_tokens
from planner.models.flops import model_shape
from planner.models.spec import ModelSpec
from planner.throughput.collectives import all_reduce_s, cluster_links, point_to_point_s, process_group
from planner.throughput.constants import CONSTANTS


@dataclass(frozen=True)
class ServingEfficiency:
    """The GPU efficiencies a serving engine reaches; docs/accuracy.md says how each was set."""

    # CALIBRATED (globally, on the published batch-1 decode steps, benchmarks/data/published_serving.yaml):
    # share of the HBM bandwidth a decode step's weight and KV reads reach.
    hbm: float = 0.635
    # CALIBRATED (globally, on the published single-request TTFTs): share of the GPU's dense peak in the
    # weight format's compute dtype that a serving prefill reaches (GEMMs, attention, norms and the
    # launch gaps of a whole forward together; fp8 GEMMs reach a lower share of their doubled peak).
    prefill_peak: float = 0.625
    # ASSUMED: the engine's own time per step with CUDA graphs (scheduling, sampling, unhidden launches).
    step_overhead_s: float = 0.5e-3


EFFICIENCY = ServingEfficiency()


@dataclass(frozen=True)
class StepCost:
    seconds: float
    bound: str  # "compute" or "memory"


def compute_rate(cluster: ClusterSpec, dtype: str, efficiency: ServingEfficiency = EFFICIENCY) -> float:
    """FLOP/s of one GPU for a serving forward in `dtype`."""
    if dtype == "bf16" and not cluster.gpu.supports("bf16"):
        dtype = "fp16"  # weight-only formats dequantize to the GPU's own 16-bit type
    return cluster.gpu.peak_tflops(dtype) * 1e12 * efficiency.prefill_peak


def _moe_read_share(spec: ModelSpec, tokens: int) -> float:
    """Expected share of one layer's experts that `tokens` routed tokens touch."""
    if not spec.is_moe:
        return 1.0
    return 1.0 - (1.0 - spec.experts_per_token / spec.num_experts) ** tokens


@dataclass(frozen=True)
class Replica:
    """One serving replica (tp x pp GPUs) of `spec` for requests shaped like `request`."""

    spec: ModelSpec
    request: InferenceRequest
    cluster: ClusterSpec
    tp: int
    pp: int
    efficiency: ServingEfficiency = EFFICIENCY

    @property
    def _rate(self) -> float:
        return compute_rate(self.cluster, self.request.weights.compute_dtype, self.efficiency)

    @property
    def _bandwidth(self) -> float:
        return self.cluster.gpu.memory_bandwidth_GBps * 1e9 * self.efficiency.hbm

    def _all_reduces_s(self, tokens: int) -> float:
        """Two all-reduces of the tokens' hidden states per layer over tp (attention and MLP outputs)."""
        if self.tp <= 1 or tokens <= 0:
            return 0.0
        links = cluster_links(self.cluster, CONSTANTS.link_efficiency)
        group = process_group(self.tp, 1, self.cluster.gpus_per_node)
        return 2 * self.spec.num_layers * all_reduce_s(links, group, tokens * self.spec.hidden_size * 2)

    def _hop_s(self) -> float:
        if self.pp <= 1:
            return 0.0
        links = cluster_links(self.cluster, CONSTANTS.link_efficiency)
        crosses = self.tp * self.pp > self.cluster.gpus_per_node
        return (self.pp - 1) * point_to_point_s(links, 0.0, crosses_nodes=crosses)

    def _token_flops(self, tokens: float, length: float) -> float:
        """Forward FLOPs of `tokens` tokens that each attend to `length` earlier tokens on average; a sliding-window
        or chunked layer attends to its window at most (planner/models/attention_window.py)."""
        shape = model_shape(self.spec)
        attended = attended_tokens(self.spec, length)
        return 2 * tokens * shape.block_matmul_params_per_token + 4 * shape.query_width * attended * tokens

    def prompt_compute_s(self) -> float:
        """One prompt's prefill compute alone (no weight read, no communication): what it takes of a GPU that is
        already reading the weights for the step it shares."""
        shape, context = model_shape(self.spec), self.request.context
        return (self._token_flops(context, context / 2) + 2 * shape.head_params) / (self.tp * self._rate)

    def prefill(self, prompts: int) -> StepCost:
        """`prompts` prompts of request.context tokens, in chunks of the engine's token budget."""
        shape = model_shape(self.spec)
        context = self.request.context
        tokens = prompts * context
        # causal attention: each token attends to context/2 earlier tokens on average
        flops = self._token_flops(tokens, context / 2) + 2 * shape.head_params * prompts
        compute_s = flops / (self.tp * self._rate)
        chunks = math.ceil(tokens / self.request.prefill_chunk)
        weights = self._read_weight_bytes()
        reads_s = chunks * weights / self._bandwidth
        comm = chunks * self._all_reduces_s(min(tokens, self.request.prefill_chunk))
        seconds = max(compute_s, reads_s) + comm + chunks * self._hop_s()
        return StepCost(seconds, "compute" if compute_s >= reads_s else "memory")

    def _read_weight_bytes(self) -> float:
        """The weights a forward reads whole: all but the input token table, which it only looks rows up in."""
        held = weight_bytes(self.spec, self.request, self.tp, self.pp) * self.pp
        return held - lookup_table_bytes(self.spec, self.tp, self.pp)

    def decode_step(self, running: int, prefill_tokens: float = 0.0) -> StepCost:
        """One token for each of `running` requests, plus `prefill_tokens` of other prompts in the same step."""
        spec, request = self.spec, self.request
        shape = model_shape(spec)
        mean_length = request.context + request.output / 2
        expert_bytes = shape.expert_params * request.weights.bits / 8 / self.tp
        # Other prompts' tokens ride in chunks of the engine's token budget, on a share of the steps: those steps
        # read the experts a chunk routes to, the others only the decode tokens' (an audit: spread over every
        # step, two clients of gpt-oss-20b read 74% of its experts each step and served half one client's rate).
        chunk = max(1.0, request.prefill_chunk - running)
        carrying = min(1.0, prefill_tokens / chunk)
        share = carrying * _moe_read_share(spec, running + math.ceil(chunk)) + (1 - carrying) * _moe_read_share(
            spec, running
        )
        weights: float = self._read_weight_bytes()
        weights -= expert_bytes * (1 - share)
        kv = kv_read_bytes_per_request(spec, request, self.tp, mean_length) * running
        memory_s = (weights + kv) / self._bandwidth
        flops = self._token_flops(running, mean_length) + 2 * running * shape.head_params
        compute_s = flops / (self.tp * self._rate)
        prompts_s = self._token_flops(prefill_tokens, request.context / 2) / (self.tp * self._rate)
        comm = self._all_reduces_s(running + math.ceil(prefill_tokens))
        seconds = max(memory_s, compute_s) + prompts_s + comm + self._hop_s() + self.efficiency.step_overhead_s
        return StepCost(seconds, "memory" if memory_s >= compute_s + prompts_s else "compute")
