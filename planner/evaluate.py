"""Evaluate one training configuration of one model on one cluster.

This is the unit of work of `estimate` and of the strategy search: every
candidate plan is an Evaluation.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from planner.errors import UserInputError
from planner.hardware.cluster import ClusterSpec
from planner.memory.estimate import MemoryEstimate, OverheadSettings, estimate_memory, fit_bytes, te_blocks_counted
from planner.memory.phases import step_peak
from planner.memory.runtime import runtime_for
from planner.memory.stack_memory import OURS, StackMemory
from planner.models.spec import ModelSpec
from planner.throughput.estimate import check_fp8_gpu, estimate_throughput
from planner.throughput.result import ThroughputEstimate
from planner.training_config import ActivationCheckpointing, KernelChoice, TrainingConfig


class Evaluation(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)  # built on first use: `plan` imports it and makes none

    config: TrainingConfig
    memory: MemoryEstimate
    cluster_summary: dict
    throughput: ThroughputEstimate | None = None
    # Why there is no throughput figure (e.g. the GPU lacks the precision's dtype).
    throughput_error: str | None = None


def cluster_summary(cluster: ClusterSpec) -> dict:
    return {
        "gpu": cluster.gpu.name,
        "gpus_per_node": cluster.gpus_per_node,
        "nodes": cluster.num_nodes,
        "world_size": cluster.world_size,
        "gpu_memory_bytes": cluster.gpu.memory_bytes,
        "intra_node_bandwidth_GBps": cluster.intra_node_bandwidth_GBps,
        "inter_node_bandwidth_GBps": cluster.inter_node_bandwidth_GBps,
        "inter_node_preset": cluster.inter_node_preset,
        "cpu_ram_per_node_bytes": cluster.cpu_ram_per_node_bytes,
    }


def memory_on(
    spec: ModelSpec,
    config: TrainingConfig,
    cluster: ClusterSpec,
    *,
    headroom_fraction: float = 0.0,
    overhead: OverheadSettings = OverheadSettings(),
    stack: StackMemory = OURS,
) -> MemoryEstimate:
    """Per-GPU memory of this config on this cluster, with the cluster's GPU and CPU capacities; `stack`: what the
    training stack decides of it (planner/memory/stack_memory.py: its loss kernel, where its checkpoints live)."""
    return estimate_memory(
        spec,
        config,
        world_size=cluster.world_size,
        gpus_per_node=cluster.gpus_per_node,
        gpu_capacity_bytes=cluster.gpu.memory_bytes,
        cpu_capacity_per_node_bytes=cluster.cpu_ram_per_node_bytes,
        nvme_capacity_per_node_bytes=cluster.nvme_per_node_bytes,
        headroom_fraction=headroom_fraction,
        overhead=overhead,
        runtime=runtime_for(cluster.gpu),
        stack=stack,
    )


def stack_memory_of(implementation: str) -> StackMemory:
    """What `--implementation`'s codebase decides of a step's memory (planner/memory/stack_memory.py)."""
    from planner.throughput.implementation import implementation_named

    return implementation_named(implementation).stack_memory()


def memory_total_on(spec: ModelSpec, config: TrainingConfig, cluster: ClusterSpec, stack: StackMemory = OURS) -> int:
    """memory_on(spec, config, cluster).total (per-GPU bytes, default overhead; the headroom does not change
    it) without the MemoryEstimate around it: the search quotes it for every family that fits but lost, and
    the estimate's categories and sources cost more than the lookup of its peak."""
    gpus_per_node, runtime = cluster.gpus_per_node, runtime_for(cluster.gpu)
    world_size = gpus_per_node * cluster.num_nodes
    peak = step_peak(spec, config, world_size=world_size, gpus_per_node=gpus_per_node, runtime=runtime, stack=stack)
    return fit_bytes(peak, gpus_per_node, runtime=runtime)[0]


def evaluate(
    spec: ModelSpec,
    config: TrainingConfig,
    cluster: ClusterSpec,
    *,
    headroom_fraction: float = 0.0,
    overhead: OverheadSettings = OverheadSettings(),
    implementation: str = "ours",
) -> Evaluation:
    from planner.throughput.implementation import (
        KERNELS_ON_SPLIT_MODELS,
        OUR_STRATEGIES,
        TORCHTITAN,
        implementation_named,
        runs_kernels_on_split_models,
    )

    preset = implementation_named(implementation)  # a wrong name is one line before any work
    split = config.tensor_parallel > 1 or config.pipeline_parallel > 1
    if split and config.kernels is not KernelChoice.EAGER and not runs_kernels_on_split_models(implementation):
        raise UserInputError(
            f"--kernels {config.kernels.value} with --tp/--pp: {KERNELS_ON_SPLIT_MODELS}; use --kernels eager, or a "
            "layout without --tp/--pp"
        )
    check_fp8_gpu(config, cluster)
    config = config.with_stage_map(spec)  # pp that does not divide the layers: the default uneven map
    stack = preset.stack_memory()
    memory = memory_on(spec, config, cluster, headroom_fraction=headroom_fraction, overhead=overhead, stack=stack)
    # The preset moves the speed and, of the memory, what the stack decides (step_sources.OTHER_STACK_MEMORY).
    if preset is not OUR_STRATEGIES:
        loss = stack.loss_kernel(spec, config).value
        te_blocks = te_blocks_counted(spec, config, stack, runtime_for(cluster.gpu))
        gelu_moved = stack.gelu_keeps_input and spec.activation in ("gelu_new", "gelu_fast")
        blocks = (
            "Megatron-Core's Transformer Engine blocks (planner/memory/te_blocks.py, read in its code)"
            if te_blocks
            else "transformers' modules"
            + (" (their tanh GELU as this stack's keeps it: its input alone)" if gelu_moved else "")
        )
        notes = [
            f"--implementation {implementation}: memory counted for {blocks}, with this stack's "
            f"cross-entropy ({loss}) and where it keeps checkpoints and gathered stages (planner/memory/"
            "stack_memory.py)" + ("" if te_blocks else "; its blocks may keep less")
        ]
        if preset is TORCHTITAN and config.activation_checkpointing is ActivationCheckpointing.SELECTIVE:
            # torchtitan's "selective" is its op-level policy by default (train_configs' selective_ac_option 'op').
            notes.append(
                "torchtitan's selective checkpointing is op-level by default (selective_ac_option = 'op'), which "
                "--ac op counts; --ac selective counts Korthikanti's (attention recomputed), 1.7x to 2.5x the memory "
                "torchtitan printed for its op-level runs (docs/accuracy.md)"
            )
        memory = memory.model_copy(update={"notes": [*memory.notes, *notes]})
    throughput, error = None, None
    try:
        throughput = estimate_throughput(spec, config, cluster, implementation=preset)
    except UserInputError as problem:
        # Memory is still meaningful when the speed cannot be estimated.
        error = str(problem)
    return Evaluation(
        config=config,
        memory=memory,
        cluster_summary=cluster_summary(cluster),
        throughput=throughput,
        throughput_error=error,
    )
