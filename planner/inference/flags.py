"""How the command that asked spells what a serving suggestion or error tells the user to change.

`plan --mode inference` has --batch, --context, --weights ...; the seed CLI has
--batch-size and --seq-len and no weight or KV-cache formats; the Python API
takes keyword arguments. A suggestion names only what the asking path has, so
it can be tried as printed (docs/inference.md, docs/selector.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.hardware.cluster import ClusterSpec


@dataclass(frozen=True)
class ServingFlags:
    """The asking path's name for each setting; None: it cannot set it, so nothing suggests changing it."""

    cluster: Callable[[ClusterSpec], str]  # what asks for this cluster
    batch: str
    context: str
    output_tokens: str | None
    weights: str | None
    kv_cache: str | None
    keywords: bool = False  # Python keyword arguments (weights='int8'), not flags (--weights int8)
    tensor_parallel: str | None = None  # the one tensor-parallel degree asked for, where the path can pin it
    gpu: str = "--gpu"  # every asking path names its GPU

    def set(self, name: str | None, value: str, placeholder: bool = False) -> str:
        """How to set `name` to `value` on this path; a placeholder ("N") is printed bare, never as a string."""
        assert name is not None
        if self.keywords:
            return f"{name}={value}" if placeholder else f"{name}={value!r}"
        return f"{name} {value}"


PLAN_SERVING_FLAGS = ServingFlags(  # `hardware-selector plan --mode inference`
    cluster=lambda cluster: f"--gpus-per-node {cluster.gpus_per_node} --nodes {cluster.num_nodes}", batch="--batch",
    context="--context", output_tokens="--output-tokens", weights="--weights", kv_cache="--kv-cache",
    tensor_parallel="--tp",
)  # fmt: skip
