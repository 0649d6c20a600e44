"""Plans for the emitter tests, built directly from a cluster and a TrainingConfig (no search)."""

from __future__ import annotations

from planner.elastic_plan import ElasticPlan, Fallback
from planner.hardware.cluster import make_cluster
from planner.memory.estimate import estimate_memory
from planner.models.resolve import resolve_model
from planner.plan import Plan
from planner.throughput.estimate import estimate_throughput
from planner.training_config import TrainingConfig


def make_plan(
    model: str = "gpt2",
    gpu: str = "cpu",
    gpus_per_node: int = 2,
    nodes: int = 1,
    with_throughput: bool = False,
    **config_fields,
) -> Plan:
    """A Plan on `gpus_per_node` x `nodes` devices; CPU plans default to fp32 (no bf16 on the pseudo-device).
    `with_throughput`: carry the formula's estimate, as a searched plan does (a run's record stores its step)."""
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
        throughput=estimate_throughput(spec, config, cluster) if with_throughput else None,
        reasons=[f"test plan: {config.strategy.value}"],
    )


def elastic_fsdp_plan() -> tuple[Plan, ElasticPlan]:
    """An FSDP plan on 2 nodes of 2 CPU processes and its elastic table over 1 to 2 nodes."""
    plan = make_plan(strategy="fsdp", nodes=2)
    fallbacks = [Fallback.of(make_plan(strategy="fsdp")), Fallback.of(plan)]
    return plan, ElasticPlan(min_nodes=1, max_nodes=2, gpus_per_node=2, fallbacks=fallbacks)
