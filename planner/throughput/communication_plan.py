"""CommunicationPlan: what a layout's step communication needs that its micro-batch does not change.

communication.py builds one per layout and cluster (`communication_plan`) and
costs each micro-batch from it (`micro_batch_communication`);
data_parallel_schemes.py reads its data-parallel collectives. It lives apart
from both so that neither imports the other round a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.throughput.collectives import Group, Links, PlacedAllReduce


@dataclass(frozen=True, slots=True)
class CommunicationPlan:
    """Everything a step's communication needs that the micro-batch, the accumulation and the activation
    checkpointing do not change: the data-parallel collectives (their sizes are the layout's shards), the
    offload transfers, and the groups and sizes the per-micro-batch traffic is computed from. The search
    builds one per layout and cluster and runs micro_batch_communication for each of its micro-batches."""

    links: Links
    interference: float  # ThroughputConstants.overlap_interference
    # The arithmetic of the layout's data-parallel scheme (data_parallel_schemes.py): (plan, accumulation,
    # forward and backward seconds of a micro-batch, blocks on the stage) -> (total DP traffic per step, what
    # the step waits for of it).
    data_parallel: Callable[[CommunicationPlan, int, float, float, int], tuple[float, float]]
    stage_zero: int
    # Data-parallel collectives, in seconds per call (0.0 where the mode has none).
    summed: float = 0.0  # the compressed sum
    all_reduce: float = 0.0
    last_bucket: float = 0.0
    reduce: float = 0.0
    gather: float = 0.0
    gather_backward: float | None = None  # the backward's all-gather where it differs from the forward's (ZeRO++)
    cross: float = 0.0  # HYBRID_SHARD's all-reduce of the shards across nodes
    updated: float = 0.0  # the updated partitions' all-gather after the optimizer step
    # Offload: a micro-batch's parameter fetch (None: no parameter offload), and the CPU optimizer's
    # per-step costs (cpu_step None: the optimizer steps on the GPU, in optimizer_step seconds).
    offloads: bool = False  # any of fetch or cpu_step
    fetch: float | None = None
    grads_down: float = 0.0
    params_up: float = 0.0
    cpu_step: float | None = None
    optimizer_step: float = 0.0
    # DeepSpeed's cpu_checkpointing: activation checkpoints per block copied to CPU memory in the forward and back
    # in the backward (Implementation.checkpoints_to_cpu; 0: kept on the GPU), over the host link at pcie_Bps.
    checkpoints_to_cpu: int = 0
    pcie_Bps: float = 0.0
    # Per-micro-batch traffic: tensor-, expert-, context-parallel and pipeline transfers.
    seq_len: int = 1
    hidden: int = 1
    element: int = 2
    tp: int = 1
    cp: int = 1
    tp_all_reduce: PlacedAllReduce | None = None  # None: tp 1, no tensor-parallel traffic
    overlaps_tensor_parallel_comm: bool = False
    expert_exchange: bool = False
    experts_per_token: int = 0
    expert_load: float = 0.0  # assignments the busiest expert-parallel rank runs, in even shares
    ep_split: int = 1
    ep_group: Group = Group(1, 1, 1)
    overlaps_expert_all_to_all: bool = False
    dispatch_host_wait_s: float = 0.0  # each MoE dispatch's wait on the host (token_dispatch.py)
    kv_width: int = 0
    cp_group: Group = Group(1, 1, 1)
    overlaps_context_exchange: bool = False
    p2p_split: int = 0  # 0: no pipeline
    virtual_stages: int = 1
    pipeline_stages: int = 1
    # DeepSpeed's pipeline engine (Implementation.serial_pipeline_transfers, .reduces_gradients_after_flush): each
    # stage-boundary transfer a blocking send/recv of its own, and the data-parallel reduction after the flush.
    serial_pipeline_transfers: bool = False
    reduces_gradients_after_flush: bool = False
    crosses_nodes: bool = False
