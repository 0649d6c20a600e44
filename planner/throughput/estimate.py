"""Throughput estimator (first cut): 6·N FLOPs per token at 40% of peak, plus a ring all-reduce.

A placeholder with the final signature so the search can be built on it; the
mechanism model (matmul efficiency, α–β collectives, bubble, offload) replaces it.
"""

from __future__ import annotations

from ..cluster import ClusterSpec
from ..model_spec import ModelSpec
from ..training_config import TrainingConfig
from .result import StepTimeBreakdown, ThroughputEstimate

ASSUMED_EFFICIENCY = 0.4


def estimate_throughput(spec: ModelSpec, config: TrainingConfig, cluster: ClusterSpec) -> ThroughputEstimate:
    world = cluster.world_size
    dp = config.data_parallel_size(world)
    global_batch = config.micro_batch * config.grad_accum * dp
    tokens = global_batch * config.seq_len
    model_flops = 6 * spec.params.active_per_token * tokens
    peak = cluster.gpu.peak_tflops(config.precision.compute_dtype) * 1e12
    compute_s = model_flops / world / (peak * ASSUMED_EFFICIENCY)
    grad_bytes = 2 * spec.params.trainable
    link_GBps = cluster.inter_node_bandwidth_GBps if cluster.is_multi_node else cluster.intra_node_bandwidth_GBps
    comm_s = 2 * (dp - 1) / dp * grad_bytes / (link_GBps * 1e9) if dp > 1 else 0.0
    step_s = compute_s + comm_s
    mfu = model_flops / world / step_s / peak
    return ThroughputEstimate(
        step_time_s=step_s,
        tokens_per_s=tokens / step_s,
        samples_per_s=global_batch / step_s,
        tflops_per_gpu=model_flops / world / step_s / 1e12,
        mfu=mfu,
        hfu=mfu,
        global_batch=global_batch,
        breakdown=StepTimeBreakdown(compute_s=compute_s, data_parallel_comm_s=comm_s, exposed_comm_s=comm_s),
        price_usd_per_gpu_hour=cluster.gpu.price_usd_per_hour,
        sources={"step_time_s": "formula: 6·N·tokens / (peak × 0.4) + ring all-reduce (first cut)"},
    )
