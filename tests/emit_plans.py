"""Plans for the emitter tests, built directly from a cluster and a TrainingConfig (no search)."""

from __future__ import annotations

from planner.hardware.cluster import make_cluster
from planner.memory.estimate import estimate_memory
from planner.models.resolve import resolve_model
from planner.plan import Plan
from planner.training_config import TrainingConfig


def make_plan(model: str = "gpt2", gpu: str = "cpu", gpus_per_node: int = 2, nodes: int = 1, **config_fields) -> Plan:
    """A Plan on `gpus_per_node` x `nodes` devices; CPU plans default to fp32 (no bf16 on the pseudo-device)."""
    cluster = make_cluster(gpu, gpus_per_node=gpus_per_node, nodes=nodes)
    fields = {"seq_len": 32, "micro_batch": 1, "grad_accum": 2}
    if gpu == "cpu":
        fields["precision"] = "fp32"
    fields.update(config_fields)
    config = TrainingConfig(**fields)
    spec = resolve_model(model)
    memory = estimate_memory(
        spec,
        config,
        world_size=cluster.world_size,
        gpus_per_node=cluster.gpus_per_node,
        gpu_capacity_bytes=cluster.gpu.memory_bytes,
    )
    return Plan(
        model=spec,
        cluster=cluster,
        config=config,
        memory=memory,
        reasons=[f"test plan: {config.strategy.value}"],
    )
