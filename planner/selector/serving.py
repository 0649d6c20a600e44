"""The selector's inference answers (task_type="inference", --mode inference): a serving plan as a dict.

`batch_size` is the number of concurrent requests; `seq_len` the prompt
length (default: InferenceRequest.for_model's); the
answer names the layout (`tensor_parallel`, `pipeline_parallel`, `replicas`),
memory per GPU in GiB, TTFT and ITL in ms, and tokens/s (docs/selector.md,
docs/inference.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from planner.hardware.cluster import GIB, ClusterSpec
from planner.inference import InferenceRequest, ServingPlan, ServingResult, plan_serving
from planner.inference.flags import ServingFlags
from planner.models.spec import ModelSpec

# What would fit, in the Python API's keyword arguments: a cluster as gpu_count and gpus_per_node (both, so the
# cluster asked for is the one searched whatever gpus_per_node the call gave).
API_SERVING_FLAGS = ServingFlags(
    cluster=lambda cluster: f"gpu_count={cluster.world_size}, gpus_per_node={cluster.gpus_per_node}",
    batch="batch_size", context="context", output_tokens="output_tokens", weights="weights", kv_cache="kv_cache",
    keywords=True, gpu="gpu",
)  # fmt: skip
# select_hardware_for_task's inference path: its prompt is seq_len, and it sets no output length or formats.
SELECT_SERVING_FLAGS = dataclasses.replace(
    API_SERVING_FLAGS, context="seq_len", output_tokens=None, weights=None, kv_cache=None
)
# In the seed CLI's flags (hardware_selector_cli/seed_cli.py), which set no output length or weight and KV formats.
SEED_SERVING_FLAGS = ServingFlags(
    cluster=lambda cluster: f"--distributed --gpu-count {cluster.world_size}", batch="--batch-size",
    context="--seq-len", output_tokens=None, weights=None, kv_cache=None,
)  # fmt: skip


def layout_name(plan: ServingPlan) -> str:
    tp, pp = plan.tensor_parallel, plan.pipeline_parallel
    if tp > 1 and pp > 1:
        return "tensor+pipeline parallel"
    if tp > 1:
        return "tensor parallel"
    if pp > 1:
        return "pipeline parallel"
    return "replicas" if plan.replicas > 1 else "single GPU"


def serving_summary(plan: ServingPlan) -> dict[str, Any]:
    """The plan as the selector's dict; its cost is the plan's own (planner/inference/cost.py)."""
    memory = plan.memory_bytes
    gpus = plan.replicas * plan.gpus_per_replica
    return {
        "fits": True,
        "task_type": "inference",
        "distributed_strategy": layout_name(plan),
        "gpu": plan.gpu,
        "gpu_count": gpus,
        "tensor_parallel": plan.tensor_parallel,
        "pipeline_parallel": plan.pipeline_parallel,
        "replicas": plan.replicas,
        "batch_per_replica": plan.batch_per_replica,
        "max_concurrent_requests": plan.max_batch,
        "weights": plan.request.weights.value,
        "kv_cache_dtype": plan.request.kv_cache.value,
        "estimated_memory": {
            "weights_gb": round(memory["weights"] / GIB, 3),
            "kv_cache_gb": round(memory["kv_cache"] / GIB, 3),
            "activations_gb": round(memory["activations"] / GIB, 3),
            "overhead_gb": round(memory["overhead"] / GIB, 3),
            "per_gpu_gb": round(memory["total"] / GIB, 3),
            "sources": dict(plan.memory_sources),
        },
        "estimated_latency": {"ttft_ms": plan.ttft_s * 1e3, "itl_ms": plan.itl_s * 1e3, "source": plan.speed_source},
        "estimated_throughput": {  # docs/inference.md, "Speed": tokens_per_s = replicas x tokens_per_s_per_replica
            "tokens_per_s": plan.cluster_tokens_per_s,
            "tokens_per_s_per_replica": plan.request_tokens_per_s,
            "decode_tokens_per_s_per_replica": plan.decode_tokens_per_s,
            "source": plan.speed_source,
        },
        "usd_per_million_tokens": plan.usd_per_million_tokens,
        "usd_per_gpu_hour": plan.usd_per_gpu_hour,
        "price_source": plan.price_source,
        "reasons": list(plan.reasons),
        "plan": plan,
    }


def no_serving_fit(result: ServingResult, cluster: ClusterSpec) -> dict[str, Any]:
    return {
        "fits": False,
        "task_type": "inference",
        "distributed_strategy": None,
        "gpu": cluster.gpu.name,
        "gpu_count": cluster.world_size,
        "rejected": dict(result.rejected),
        "suggestions": list(result.suggestions),
        "plan": None,
    }


def inference_answer(
    spec: ModelSpec, cluster: ClusterSpec, request: InferenceRequest, flags: ServingFlags = API_SERVING_FLAGS
) -> dict[str, Any]:
    result = plan_serving(spec, cluster, request, flags)
    if result.best is None:
        return no_serving_fit(result, cluster)
    summary = serving_summary(result.best)
    summary["rejected"] = dict(result.rejected)
    summary["notes"] = list(result.notes)  # e.g. bf16 served in fp16 on a GPU without bf16
    return summary
