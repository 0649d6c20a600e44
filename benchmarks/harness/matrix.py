"""The benchmark matrix: strategies x GPU counts x micro-batches x checkpointing.

Every combination is checked by the planner; the ones that cannot run (bad
layout, or more memory than the GPU has) are pruned with their reason, the
rest carry the planner's predicted memory and throughput so that a run can be
compared with its prediction later.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field

from benchmarks_db.record import spec_hash
from planner.calibration import strategy_family
from planner.errors import UserInputError
from planner.hardware.cluster import ClusterSpec, make_cluster
from planner.memory.estimate import estimate_memory
from planner.memory.runtime import runtime_for
from planner.models.spec import ModelSpec
from planner.throughput.result import ThroughputEstimate
from planner.training_config import ActivationCheckpointing, Precision, TrainingConfig

MATRIX_SCHEMA_VERSION = 1

# The strategy names a user types, and the TrainingConfig fields each means.
STRATEGY_FIELDS: dict[str, dict] = {
    "ddp": {"strategy": "ddp"},
    "fsdp": {"strategy": "fsdp", "fsdp_sharding": "full"},
    "fsdp-grad-op": {"strategy": "fsdp", "fsdp_sharding": "grad-op"},
    "zero1": {"strategy": "deepspeed", "zero_stage": 1},
    "zero2": {"strategy": "deepspeed", "zero_stage": 2},
    "zero3": {"strategy": "deepspeed", "zero_stage": 3},
    # our engine: tensor or pipeline parallel over 2 GPUs (ZeRO-1 on what is left for data parallelism)
    "engine-tp2": {"strategy": "engine", "layout": {"tp": 2}, "zero_stage": 1},
    # a pipeline needs at least as many micro-batches per step as stages; 2 per stage keeps the bubble at 1/4
    "engine-pp2": {"strategy": "engine", "layout": {"pp": 2}, "zero_stage": 1, "grad_accum": 4},
}
DEFAULT_STRATEGIES = ["ddp", "fsdp", "fsdp-grad-op", "zero1", "zero2", "zero3"]
SHARDED = {"fsdp", "fsdp-grad-op", "zero1", "zero2", "zero3"}  # engine layouts are checked by the planner

# What a hardware kind means when no GPU of it is present to ask.
DEFAULT_GPU = {"cuda": "A100-80GB", "rocm": "MI300X", "cpu": "cpu"}


class MatrixEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str  # stable id of (model, hardware, config): what a resumed run skips
    label: str
    gpu: str
    world_size: int
    gpus_per_node: int
    nodes: int
    strategy: str
    config: TrainingConfig
    predicted_memory_bytes: int
    predicted: ThroughputEstimate | None = None
    prediction_note: str | None = None


class PrunedEntry(BaseModel):
    label: str
    reason: str


class BenchmarkMatrix(BaseModel):
    schema_version: int = MATRIX_SCHEMA_VERSION
    generated_at: datetime
    model: str
    model_spec_hash: str
    tiny: bool
    hardware: str
    gpu: str
    gpu_note: str  # which GPU the matrix targets, and why that one
    seq_len: int
    precision: str
    entries: list[MatrixEntry] = Field(default_factory=list)
    pruned: list[PrunedEntry] = Field(default_factory=list)


def gpu_counts_up_to(max_gpus: int) -> list[int]:
    """1, 2, 4, ... up to max_gpus, and max_gpus itself."""
    if max_gpus < 1:
        raise UserInputError(f"--max-gpus must be at least 1, got {max_gpus}")
    counts, count = [], 1
    while count <= max_gpus:
        counts.append(count)
        count *= 2
    if counts[-1] != max_gpus:
        counts.append(max_gpus)
    return counts


def matrix_key(spec_digest: str, tiny: bool, gpu: str, world_size: int, nodes: int, config: TrainingConfig) -> str:
    identity = {
        "spec": spec_digest,
        "tiny": tiny,
        "gpu": gpu,
        "world": world_size,
        "nodes": nodes,
        "config": config.model_dump(mode="json"),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


def predict_throughput(spec: ModelSpec, config: TrainingConfig, cluster: ClusterSpec):
    """(estimate, note): the estimator's figures, or why there are none."""
    try:
        from planner.throughput.estimate import estimate_throughput
    except ImportError:
        return None, "no throughput estimator in this build"
    try:
        return estimate_throughput(spec, config, cluster), None
    except UserInputError as error:
        return None, str(error)


def generate_matrix(
    spec: ModelSpec,
    *,
    hardware: str,
    gpu: str,
    gpu_note: str,
    gpu_counts: list[int],
    gpus_per_node: int,
    strategies: list[str],
    micro_batches: list[int],
    checkpointing: list[str],
    seq_len: int,
    precision: str,
    tiny: bool = False,
    headroom: float = 0.1,
) -> BenchmarkMatrix:
    unknown = [name for name in strategies if name not in STRATEGY_FIELDS]
    if unknown:
        raise UserInputError(f"unknown strategy '{unknown[0]}'; use some of {', '.join(STRATEGY_FIELDS)}")
    digest = spec_hash(spec)
    matrix = BenchmarkMatrix(
        generated_at=datetime.now(timezone.utc).replace(microsecond=0),
        model=spec.name,
        model_spec_hash=digest,
        tiny=tiny,
        hardware=hardware,
        gpu=gpu,
        gpu_note=gpu_note,
        seq_len=seq_len,
        precision=precision,
    )
    for world in gpu_counts:
        per_node = min(world, gpus_per_node)
        if world % per_node:
            matrix.pruned.append(PrunedEntry(label=f"{world} GPUs", reason=f"not a multiple of {per_node} per node"))
            continue
        cluster = make_cluster(gpu, gpus_per_node=per_node, nodes=world // per_node)
        for name in strategies:
            for checkpoint in checkpointing:
                for micro_batch in micro_batches:
                    label = f"{name} x{world} mb={micro_batch} ac={checkpoint}"
                    if world == 1 and name in SHARDED:
                        matrix.pruned.append(PrunedEntry(label=label, reason="sharding needs 2 or more GPUs"))
                        continue
                    entry, reason = _entry(
                        spec, digest, tiny, cluster, name, label, micro_batch, checkpoint, seq_len, precision, headroom
                    )
                    if entry is None:
                        matrix.pruned.append(PrunedEntry(label=label, reason=reason))
                    else:
                        matrix.entries.append(entry)
    return matrix


def _entry(
    spec, digest, tiny, cluster: ClusterSpec, name, label, micro_batch, checkpoint, seq_len, precision, headroom
) -> tuple[MatrixEntry | None, str]:
    try:
        config = TrainingConfig(
            **STRATEGY_FIELDS[name],
            micro_batch=micro_batch,
            seq_len=seq_len,
            precision=Precision(precision),
            activation_checkpointing=ActivationCheckpointing(checkpoint),
        )
        memory = estimate_memory(
            spec,
            config,
            world_size=cluster.world_size,
            gpus_per_node=cluster.gpus_per_node,
            gpu_capacity_bytes=cluster.gpu.memory_bytes,
            cpu_capacity_per_node_bytes=cluster.cpu_ram_per_node_bytes,
            headroom_fraction=headroom,
            runtime=runtime_for(cluster.gpu),  # the cpu device: its offloaded states stay in its RAM
        )
    except UserInputError as error:
        return None, str(error)
    if not memory.fits:
        need, have = memory.total / 2**30, memory.usable_bytes / 2**30
        return None, f"needs {need:.1f} GiB per GPU, {have:.1f} GiB usable"
    predicted, note = predict_throughput(spec, config, cluster)
    return MatrixEntry(
        key=matrix_key(digest, tiny, cluster.gpu.name, cluster.world_size, cluster.num_nodes, config),
        label=label,
        gpu=cluster.gpu.name,
        world_size=cluster.world_size,
        gpus_per_node=cluster.gpus_per_node,
        nodes=cluster.num_nodes,
        strategy=strategy_family(config),
        config=config,
        predicted_memory_bytes=memory.total,
        predicted=predicted,
        prediction_note=note,
    ), ""
