"""TTFT, time between tokens and tokens/s of one serving replica, and the regime the traffic falls in.

(docs/inference.md, "Speed"; compared with published GPU measurements in docs/accuracy.md.)
The request's `batch` is the number of concurrent clients, each sending its
next request when the last one ends (a closed loop, as vLLM's, NIM's and
lmdeploy's benchmarks drive a server). The step costs are in roofline.py.

- Continuous batching (vLLM, TensorRT-LLM in-flight batching, TurboMind): the
  engine decodes every running request in each step, so the concurrency
  becomes the effective decode batch, up to what the KV cache holds
  (`max_running`). Prefill and decode share the GPU: in steady state each of
  the other running requests brings its prompt once per `output` steps, so a
  step carries (running - 1) x context / output prompt tokens besides its
  decode tokens, up to the engine's token budget. A new prompt waits for the
  prefills ahead of it: the prefill load rho = (running - 1) x prefill /
  request time, and the mean wait of a deterministic-service queue (M/D/1),
  rho / (2 (1 - rho)) prefills, the request time being the one that wait makes
  (solved together, _consistent_ttft).
- Regimes: "single request" (one client: decode reads the weights for one
  token), "batched" (every client runs), "saturated (queueing)" (more clients
  than the KV cache holds: the rest wait in the queue, TTFT grows with the
  queue while ITL and tokens/s stay at the full batch's), "saturated (prefill)"
  (every client runs, the GPU's own bound below sets the pace and the prompts
  take most of the GPU's time: long prompts, short outputs, many clients).
- The GPU's own bound: each request costs its prompt's prefill compute and its
  share of the decode steps, so no concurrency completes requests faster than
  1 / (prompt compute + (output - 1) x decode step / running). The interleaved-prompt
  steps above carry the other requests' prompts over `output - 1` steps, which
  misses a 1/output share of them (all of them at one output token); where the
  bound is the tighter one, it sets the request time and the wait before the
  first token grows to fill it.
- Static batching (`request.batching`, e.g. TensorRT-LLM's gptSessionBenchmark):
  the whole batch is prefilled, then decoded together.
- tokens/s: generated tokens per second of the replica, by Little's law:
  running x output / (TTFT without the queue + (output - 1) x ITL).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.hardware.cluster import ClusterSpec
from planner.inference.memory import serving_memory
from planner.inference.request import Batching, InferenceRequest
from planner.inference.roofline import EFFICIENCY, Replica, ServingEfficiency
from planner.models.spec import ModelSpec

HBM_EFFICIENCY = EFFICIENCY.hbm
STEP_OVERHEAD_S = EFFICIENCY.step_overhead_s
SOURCE = (
    f"roofline (calibrated: {EFFICIENCY.hbm:.0%} of HBM bandwidth in decode, {EFFICIENCY.prefill_peak:.0%} of the "
    f"dense peak in prefill; assumed: {EFFICIENCY.step_overhead_s * 1e3:g} ms per step) + continuous batching "
    "(concurrency = decode batch up to the KV cache, prefill shares the steps, queueing beyond); docs/accuracy.md"
)

SINGLE = "single request"
BATCHED = "batched"
SATURATED = "saturated (queueing)"
PREFILL_SATURATED = "saturated (prefill)"
STATIC = "static batch"


@dataclass(frozen=True)
class ServingSpeed:
    ttft_s: float  # mean time to first token, queueing included
    itl_s: float  # mean time between tokens of one request
    decode_tokens_per_s: float  # running / ITL: the decode rate of the replica
    request_tokens_per_s: float  # generated tokens/s of the replica over whole requests (Little's law)
    prefill_bound: str  # "compute" or "memory"
    decode_bound: str
    regime: str = BATCHED  # SINGLE, BATCHED, SATURATED, PREFILL_SATURATED or STATIC
    running: int = 1  # the effective decode batch
    max_running: int = 1  # requests of this length the replica's KV cache holds
    queue_s: float = 0.0  # mean wait before a request is admitted


def max_running(spec: ModelSpec, request: InferenceRequest, cluster: ClusterSpec, tp: int, pp: int) -> int:
    """Requests of this length whose KV cache the replica holds beside the weights (at least 1)."""
    return max(serving_memory(spec, request, cluster.gpu.memory_bytes, tp, pp).max_batch, 1)


def serving_speed(
    spec: ModelSpec,
    request: InferenceRequest,
    cluster: ClusterSpec,
    tp: int,
    pp: int,
    efficiency: ServingEfficiency = EFFICIENCY,
) -> ServingSpeed:
    replica = Replica(spec, request, cluster, tp, pp, efficiency)
    capacity = max_running(spec, request, cluster, tp, pp)
    if request.batching is Batching.STATIC:
        return _static(replica, capacity)
    clients = request.batch
    running = min(clients, capacity)
    prefill = replica.prefill(1)
    # The other prompts' tokens a step carries, up to the engine's token budget beside the decode tokens (the rest
    # is the GPU's own bound's, below).
    interleaved = max(0.0, min((running - 1) * request.context / request.output, request.prefill_chunk - running))
    step = replica.decode_step(running, interleaved)
    tail = (request.output - 1) * step.seconds
    ttft = _consistent_ttft(prefill.seconds, running, tail) if running > 1 else prefill.seconds
    request_s = ttft + tail
    regime = SINGLE if clients == 1 else BATCHED if clients <= capacity else SATURATED
    decode_share = (request.output - 1) * replica.decode_step(running).seconds / running
    prompts_s = running * replica.prompt_compute_s()
    least_request_s = prompts_s + running * decode_share
    if request_s < least_request_s * (1 - 1e-9):  # the GPU's own bound (module docstring)
        request_s = least_request_s
        ttft = request_s - tail
        if regime == BATCHED and prompts_s > least_request_s / 2:  # prompts take most of the GPU
            regime = PREFILL_SATURATED
    queue = (clients - running) * request_s / running
    return ServingSpeed(
        ttft_s=ttft + queue,
        itl_s=step.seconds,
        decode_tokens_per_s=running / step.seconds,
        request_tokens_per_s=running * request.output / request_s,
        prefill_bound=prefill.bound,
        decode_bound=step.bound,
        regime=regime,
        running=running,
        max_running=capacity,
        queue_s=queue,
    )


def _md1_wait(prefill_s: float, load: float) -> float:
    """Time to first token: the prefill, after the M/D/1 queue's mean wait of load / (2 (1 - load)) prefills."""
    return prefill_s * (1 + load / (2 * (1 - load)))


def _consistent_ttft(prefill_s: float, running: int, tail_s: float) -> float:
    """The time to first token whose own request time sets the prefill load: R = wait(load(R)) + tail, with
    load(R) = (running - 1) x prefill / R, solved by bisection (the wait falls as R grows, so the root is one).
    The load read off an unqueued request time (prefill + tail) reached 1 at short outputs and many clients, where
    it was clipped at 0.95: 3 clients of 16-token prompts then waited 10.5 prefills where 2 waited one."""

    def excess(request_s: float) -> float:
        return _md1_wait(prefill_s, (running - 1) * prefill_s / request_s) + tail_s - request_s

    low = (running - 1) * prefill_s * (1 + 1e-12)  # the load just under 1: the wait without bound
    high = max(low, prefill_s + tail_s) * 2
    while excess(high) > 0:
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if excess(middle) > 0 else (low, middle)
    return high - tail_s


def _static(replica: Replica, capacity: int) -> ServingSpeed:
    request = replica.request
    prefill = replica.prefill(request.batch)
    step = replica.decode_step(request.batch)
    whole = prefill.seconds + (request.output - 1) * step.seconds
    return ServingSpeed(
        ttft_s=prefill.seconds,
        itl_s=step.seconds,
        decode_tokens_per_s=request.batch / step.seconds,
        request_tokens_per_s=request.batch * request.output / whole,
        prefill_bound=prefill.bound,
        decode_bound=step.bound,
        regime=STATIC,
        running=request.batch,
        max_running=capacity,
    )
