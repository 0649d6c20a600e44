"""The serving layouts of a model on a cluster, and why each tensor-parallel degree left out cannot be used.

Tensor parallelism stays inside a node and splits the attention heads evenly, and the KV heads divide tp or
tp divides them (vLLM and TensorRT-LLM require both; a GPU keeps a copy of a KV head when tp exceeds their
number); pipeline stages take whole layers (docs/inference.md, "Layouts"). A degree the node allows but the
heads do not is listed under "other layouts" with its reason, never dropped without a word.
"""

from __future__ import annotations

from planner.hardware.cluster import ClusterSpec
from planner.models.spec import ModelSpec
from planner.search.strategy_layout import divisors


def tp_refusal(spec: ModelSpec, tp: int) -> str | None:
    """Why tensor parallelism over `tp` GPUs cannot split this model's heads, or None when it can."""
    if spec.num_heads % tp:
        return f"{spec.num_heads} attention heads do not split evenly over {tp} GPUs"
    if spec.num_kv_heads % tp and tp % spec.num_kv_heads:
        return f"{spec.num_kv_heads} KV heads neither split evenly over {tp} GPUs nor divide {tp}"
    return None


def serving_layouts(spec: ModelSpec, cluster: ClusterSpec, only_tp: int | None = None) -> list[tuple[int, int]]:
    """(tp, pp) pairs: tp inside a node dividing the heads, KV heads and tp dividing one another (`only_tp`: that
    degree alone, as a request pinning it asks)."""
    layouts = []
    for tp in divisors(cluster.gpus_per_node):
        if tp_refusal(spec, tp) is not None or (only_tp is not None and tp != only_tp):
            continue
        for pp in divisors(cluster.world_size // tp):
            if pp <= spec.num_layers:
                layouts.append((tp, pp))
    return layouts


def excluded_tensor_parallel(spec: ModelSpec, cluster: ClusterSpec) -> dict[str, str]:
    """Each tensor-parallel degree the node's GPU count allows and the heads do not: "TP3" -> why."""
    excluded = {}
    for tp in divisors(cluster.gpus_per_node):
        why = tp_refusal(spec, tp)
        if why is not None:
            excluded[f"TP{tp} (any pipeline stages)"] = f"{why} (vLLM and TensorRT-LLM split heads evenly)"
    return excluded


# Said wherever a pipeline-parallel plan's speed is shown (roofline.py charges each decode step the stages one
# after another; docs/inference.md, "Speed"): the engines' in-flight micro-batches are not modelled.
PP_CAVEAT = (
    "pipeline-parallel serving is modelled without micro-batches in flight: each decode step passes the stages "
    "one after another, while vLLM and TensorRT-LLM keep several micro-batches in flight, so the batched ITL and "
    "tokens/s here are likely pessimistic; unvalidated: docs/accuracy.md has no pipeline-parallel serving row"
)
PP_CAVEAT_SHORT = "PP modelled without in-flight micro-batches: likely pessimistic, unvalidated"
