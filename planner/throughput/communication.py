"""Communication per optimizer step, and how much of it the step actually waits for.

Data-parallel traffic follows each implementation:
- DDP (and FSDP NO_SHARD, ZeRO-0): one gradient all-reduce per optimizer step
  (no_sync during accumulation), in buckets overlapped with the last backward;
  the last bucket is exposed.
- ZeRO-1: gradients reduce-scattered once per step during the last backward;
  updated parameters all-gathered after the optimizer step (exposed).
- ZeRO-2: gradients reduce-scattered after every micro-batch's backward
  ("each rank retains only the accumulated gradients of its partition", so
  reduction cannot wait for the accumulation boundary: DeepSpeed issue #2252);
  parameters all-gathered after the step. FSDP SHARD_GRAD_OP gathers
  parameters once per micro-batch.
- ZeRO-3 / FSDP FULL_SHARD: every micro-batch all-gathers each block's
  parameters in forward and again in backward and reduce-scatters its
  gradients (1.5x DDP's volume), prefetched one block ahead; the first block's
  gather is exposed. HYBRID_SHARD does this inside a node and all-reduces the
  gradient shards across nodes.
Overlapped traffic costs max(0, comm - compute) plus an interference share of
the hidden part. Tensor-, expert- and pipeline-parallel traffic is on the
critical path. Our engine's compressed gradient sums (int8, onebit) replace the
gradient reduction with compressed_reduction.py's, once per step and not
overlapped; the parameter all-gathers stay as above.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.contract.choices import GradientCompression
from planner.models.flops import ModelShape
from planner.throughput.collectives import (
    Group,
    Links,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    placed_all_reduce,
    point_to_point_s,
    process_group,
    reduce_scatter_s,
)
from planner.throughput.communication_plan import CommunicationPlan
from planner.throughput.compute import StageCompute
from planner.throughput.constants import ThroughputConstants
from planner.throughput.cpu_optimizer import cpu_optimizer
from planner.throughput.data_parallel_schemes import (
    all_reduce_scheme,
    compressed_scheme,
    grad_op_scheme,
    partitioned_scheme,
    sharded_scheme,
    waited_s,
)
from planner.throughput.implementation import OUR_STRATEGIES, Implementation
from planner.training_config import ActivationCheckpointing, FsdpSharding, Offload, Precision, Strategy, TrainingConfig

# Looked up once: a member access on an Enum class runs Python code in CPython 3.11 (enum.property), and
# micro_batch_communication runs for every candidate the search estimates.
# Checkpointing that runs a block's forward again in backward, its collectives with it: full, and op-level (our
# policy keeps matmul and attention outputs, no collective's: backends/parts/op_checkpoint_policy.py).
FORWARD_AGAIN = (ActivationCheckpointing.FULL, ActivationCheckpointing.OP)

OPTIMIZER_STATE_BYTES = {"adamw": 12.0, "adamw-8bit": 6.0, "adafactor": 4.0, "sgd": 8.0, "lion": 8.0}
OPTIMIZER_STEP_BYTES = {"adamw": 28.0, "adamw-8bit": 16.0, "adafactor": 16.0, "sgd": 20.0, "lion": 20.0}


@dataclass(slots=True)
class StepComm:
    data_parallel_s: float  # total DP traffic per step, before overlap
    exposed_s: float  # what the step waits for: exposed DP + TP + EP + PP traffic
    tensor_parallel_s: float
    pipeline_p2p_s: float
    expert_parallel_s: float
    context_parallel_s: float
    offload_s: float
    optimizer_step_s: float


def _zero_stage(config: TrainingConfig) -> int:
    """The ZeRO-equivalent sharding of the data-parallel wrapper."""
    if config.strategy is Strategy.DDP:
        return 0
    if config.strategy is Strategy.FSDP:
        return {FsdpSharding.NONE: 0, FsdpSharding.GRAD_OP: 2, FsdpSharding.FULL: 3, FsdpSharding.HYBRID: 3}[
            config.fsdp_sharding
        ]
    return config.zero_stage


def communication_plan(
    shape: ModelShape,
    config: TrainingConfig,
    links: Links,
    *,
    world_size: int,
    pcie_Bps: float,
    memory_Bps: float,
    k: ThroughputConstants,
    nvme_Bps: float,
    implementation: Implementation = OUR_STRATEGIES,
    host_memory: bool = False,
) -> CommunicationPlan:
    """`implementation` says whether stage-boundary tensors are split over the TP
    ranks (Megatron-LM's scatter-gather; otherwise only sequence parallelism
    splits them) and whether sharded gathers reach the node's combined NICs. `nvme_Bps`: the node's NVMe
    read/write bytes/s, which ZeRO-Infinity's offload shares among the node's GPUs (needed only then).
    `host_memory`: the device's memory is the host's (the cpu device), so an offloaded optimizer steps on the
    same cores at the device's own rate, not a server's CPU Adam rate: offload adds only its copies.
    Reads neither the micro-batch, the accumulation nor the activation checkpointing of `config`."""
    tp, pp, cp = config.tensor_parallel, config.pipeline_parallel, config.context_parallel
    dp = max(world_size // config.model_parallel_size, 1)  # tp x pp x cp ranks share a replica
    gpn = links.gpus_per_node
    element = 4 if config.precision is Precision.FP32 else 2
    # DDP trains fp32 weights under autocast, so its gradients are fp32 unless the run is pure bf16.
    ddp_fp32_grads = config.strategy is Strategy.DDP and config.precision is not Precision.BF16
    grad_bytes = 4 if config.precision is Precision.FP32 or ddp_fp32_grads else 2
    # QLoRA's frozen base travels as 4-bit NF4 (0.5 byte) plus its scales.
    param_bytes = 0.5625 if config.qlora else element
    if config.fp8 and config.strategy is Strategy.FSDP:
        # torchao's float8 all-gather: block weights travel as FP8 (1 byte); embedding and head stay 16-bit.
        fp8_share = max(shape.total_params - 2 * shape.head_params, 0) / shape.total_params
        param_bytes = element - (element - 1) * fp8_share
    experts_elsewhere = shape.expert_params * (1 - 1 / config.expert_parallel)
    params = (shape.total_params - experts_elsewhere) / (tp * pp)
    if config.lora_rank:  # only the adapters have gradients (planner/memory/lora_targets.py)
        routed = shape.routed_adapters_at_rank_1
        adapters = shape.adapters_at_rank_1 - routed + routed / config.expert_parallel
        trainable = config.lora_rank * adapters / (tp * pp)
    else:
        trainable = (shape.trainable_params - experts_elsewhere) / (tp * pp)
    stage_zero = _zero_stage(config)

    dp_group = process_group(dp, tp * cp, gpn)
    hybrid = config.strategy is Strategy.FSDP and config.fsdp_sharding is FsdpSharding.HYBRID
    shard_group = process_group(min(dp, max(gpn // tp, 1)), tp, gpn) if hybrid else dp_group
    replica_group = (
        process_group(dp // shard_group.size, tp * shard_group.size, gpn) if hybrid else process_group(1, 1, gpn)
    )
    shards = shard_group.size

    summed = all_reduce = last_bucket = reduce = gather = cross = updated = 0.0
    gather_backward: float | None = None  # ZeRO++: the backward's gather, inside the node
    if config.compression is not GradientCompression.NONE:
        # Our engine: one synchronous compressed sum per step, at the boundary (compressed_reduction.py).
        from planner.throughput.compressed_reduction import compressed_reduction  # here: only a compressed plan

        data_parallel = compressed_scheme
        summed = compressed_reduction(
            config.compression,
            links,
            dp_group,
            trainable,
            all_reduce=stage_zero == 0,
            grad_bytes=grad_bytes,
            memory_Bps=memory_Bps,
        ).total_s
        if stage_zero in (1, 2):
            updated = all_gather_s(links, dp_group, trainable * element)
        elif stage_zero == 3:
            gather = all_gather_s(links, dp_group, params * param_bytes)
    elif stage_zero == 0:
        data_parallel = all_reduce_scheme
        all_reduce = all_reduce_s(links, dp_group, trainable * grad_bytes)
        last_bucket = all_reduce_s(links, dp_group, min(k.ddp_bucket_bytes, trainable * grad_bytes))
    elif stage_zero in (1, 2):
        reduce = reduce_scatter_s(links, dp_group, trainable * grad_bytes)
        if implementation.all_reduces_fp32_gradients and stage_zero == 1:
            # DeepSpeed's BF16Optimizer: the whole fp32 gradient all-reduced, each rank steps its partition
            reduce = all_reduce_s(links, dp_group, trainable * 4)
        if config.strategy is Strategy.FSDP:  # SHARD_GRAD_OP: gather once per micro-batch, kept to backward
            data_parallel = grad_op_scheme
            gather = all_gather_s(links, dp_group, params * param_bytes)
        else:
            # Only the optimizer's (trainable) partitions change and are gathered back.
            data_parallel = partitioned_scheme
            updated = all_gather_s(links, dp_group, trainable * element)
    elif config.zeropp:  # ZeRO-3's collectives as ZeRO++ sends them (zeropp.py)
        from planner.throughput.zeropp import zeropp_collectives  # here: only a ZeRO++ plan

        data_parallel = sharded_scheme
        zeropp = zeropp_collectives(links, dp_group, params, trainable, grad_bytes)
        gather, gather_backward, reduce = zeropp.gather_forward, zeropp.gather_backward, zeropp.reduce
    else:
        data_parallel = sharded_scheme
        per_gpu_nic = implementation.sharded_gather_per_gpu_nic
        gather = all_gather_s(links, shard_group, params * param_bytes, per_gpu_nic)
        reduce = reduce_scatter_s(links, shard_group, trainable * grad_bytes, per_gpu_nic)
        cross = all_reduce_s(links, replica_group, trainable * grad_bytes / shards)

    # Offload traffic over PCIe and the CPU optimizer.
    param_shard = params / shards if stage_zero == 3 else params
    grad_shard = trainable / shards if stage_zero >= 1 else trainable
    fetch: float | None = None
    grads_down = params_up = optimizer_step = 0.0
    cpu_step: float | None = None
    if config.offload_params is not Offload.NONE:
        fetch = 2 * param_shard * param_bytes / pcie_Bps
        if config.offload_params is Offload.NVME:
            fetch += 2 * param_shard * param_bytes * gpn / nvme_Bps
    on_cpu = cpu_optimizer(config)  # which optimizer steps on the CPU, if any (planner/throughput/cpu_optimizer.py)
    if on_cpu is not None:
        grads_down = grad_shard * grad_bytes / pcie_Bps
        params_up = grad_shard * element / pcie_Bps
        if host_memory:  # the rank's own core steps its shard, as it would without offload
            cpu_step = grad_shard * OPTIMIZER_STEP_BYTES[config.optimizer.value] / memory_Bps
        else:
            cpu_step = grad_shard * gpn / on_cpu.params_per_s(k)
        if config.offload_optimizer is Offload.NVME:
            cpu_step += 2 * grad_shard * OPTIMIZER_STATE_BYTES[config.optimizer.value] * gpn / nvme_Bps
    else:
        optimizer_step = grad_shard * OPTIMIZER_STEP_BYTES[config.optimizer.value] / memory_Bps

    expert_exchange = bool(shape.experts) and config.expert_parallel > 1
    expert_load, ep_split, ep_group = 0.0, 1, Group(1, 1, 1)
    if expert_exchange:
        # The busiest rank's share sets the exchange's length (planner/expert_routing.py).
        expert_load = config.routing.busiest_rank_load(config.expert_parallel)
        ep_split = tp if implementation.expert_tokens_split_over_tp else 1  # (planner/throughput/implementation.py)
        ep_group = process_group(config.expert_parallel, tp, gpn)
    p2p_split = 0
    if pp > 1:
        p2p_split = tp if (implementation.p2p_scatter_gather or config.sequence_parallel) else 1
    return CommunicationPlan(
        links=links,
        interference=k.overlap_interference,
        data_parallel=data_parallel,
        stage_zero=stage_zero,
        summed=summed,
        all_reduce=all_reduce,
        last_bucket=last_bucket,
        reduce=reduce,
        gather=gather,
        gather_backward=gather_backward,
        cross=cross,
        updated=updated,
        offloads=fetch is not None or cpu_step is not None,
        fetch=fetch,
        grads_down=grads_down,
        params_up=params_up,
        cpu_step=cpu_step,
        optimizer_step=optimizer_step,
        seq_len=config.seq_len,
        hidden=shape.hidden,
        element=element,
        tp=tp,
        cp=cp,
        tp_all_reduce=placed_all_reduce(links, process_group(tp, 1, gpn)) if tp > 1 else None,
        overlaps_tensor_parallel_comm=implementation.overlaps_tensor_parallel_comm,
        expert_exchange=expert_exchange,
        experts_per_token=shape.experts_per_token,
        expert_load=expert_load,
        ep_split=ep_split,
        ep_group=ep_group,
        overlaps_expert_all_to_all=implementation.overlaps_expert_all_to_all,
        dispatch_host_wait_s=implementation.dispatch_host_wait_s,
        kv_width=shape.kv_width,
        cp_group=process_group(cp, tp, gpn),
        overlaps_context_exchange=implementation.overlaps_context_exchange,
        p2p_split=p2p_split,
        pipeline_stages=pp,
        serial_pipeline_transfers=implementation.serial_pipeline_transfers,
        reduces_gradients_after_flush=implementation.reduces_gradients_after_flush and pp > 1 and stage_zero <= 1,
        checkpoints_to_cpu=implementation.memory.checkpoints_to_cpu,
        pcie_Bps=pcie_Bps,
        virtual_stages=config.virtual_stages,
        crosses_nodes=world_size > gpn,
    )


def deepspeed_critical_transfers(micro_batches: int, stages: int) -> int:
    """Stage-boundary transfers on the critical path of DeepSpeed's TrainSchedule, each a blocking send/recv
    that both stages wait out (deepspeed/runtime/pipe/p2p.py, engine.py; Implementation.serial_pipeline_transfers).
    A middle stage runs four a micro-batch one after another (receive the activation, send the previous
    gradient, send the activation, receive the gradient); the pipeline's fill and drain add 2 (p - 4). Counted by
    running the schedule's instruction streams with timed transfers (tests/test_deepspeed_pipeline.py), not
    fitted: 2m at two stages, 2(p - 1) at one micro-batch, otherwise 4m + 2p - 8."""
    if stages <= 1:
        return 0
    if stages == 2:
        return 2 * micro_batches
    if micro_batches <= 1:
        return 2 * (stages - 1)
    return 4 * micro_batches + 2 * stages - 8


def _offload(plan: CommunicationPlan, accum: int, fwd: float, bwd: float) -> tuple[float, float]:
    """(offload seconds per step, optimizer step on the GPU)."""
    offload = 0.0
    if plan.fetch is not None:
        offload += accum * waited_s(plan.fetch, fwd + bwd, plan.interference)
    if plan.cpu_step is None:
        return offload, plan.optimizer_step
    # Partitioned gradients (ZeRO-2/3) leave the GPU after every backward, the others once per step.
    downloads = accum if plan.stage_zero >= 2 else 1
    offload += downloads * waited_s(plan.grads_down, bwd, plan.interference) + plan.cpu_step + plan.params_up
    return offload, 0.0


def micro_batch_communication(
    plan: CommunicationPlan,
    micro_batch: int,
    accum: int,
    checkpointing: ActivationCheckpointing,
    stage: StageCompute,
) -> StepComm:
    """The step's communication at one micro-batch, accumulation and activation checkpointing of the plan's
    layout, `stage` being that micro-batch's compute."""
    links, tp = plan.links, plan.tp
    fwd, bwd, blocks = stage.forward_s, stage.backward_s + stage.recompute_s, stage.blocks
    dp_total, exposed = plan.data_parallel(plan, accum, fwd, bwd, blocks)
    if plan.reduces_gradients_after_flush:  # DeepSpeed's ReduceGrads after the schedule's last backward: all of it
        exposed = dp_total
    offload, optimizer_step = _offload(plan, accum, fwd, bwd) if plan.offloads else (0.0, plan.optimizer_step)

    # Tensor parallelism: two all-reduces (or all-gather + reduce-scatter under
    # sequence parallelism, the same volume) per block in forward, two in
    # backward, two more when full or op-level checkpointing repeats the forward.
    rows = micro_batch * plan.seq_len / plan.cp  # this rank's share of the tokens
    activation_bytes = rows * plan.hidden * plan.element
    forward_again = checkpointing in FORWARD_AGAIN
    tp_per_block = 4 + (2 if forward_again else 0)
    tp_comm = 0.0  # what all_reduce_s gives a group of one
    if plan.tp_all_reduce is not None:
        tp_comm = accum * blocks * tp_per_block * plan.tp_all_reduce.seconds(activation_bytes)
    # Split into the GEMMs beside them (userbuffers), the collectives wait only for what the matmuls cannot cover.
    tp_exposed = max(0.0, tp_comm - accum * stage.matmul_s) if plan.overlaps_tensor_parallel_comm else tp_comm

    ep_comm = 0.0
    if plan.expert_exchange:
        routed = activation_bytes * plan.experts_per_token * plan.expert_load
        routed /= plan.ep_split
        ep_comm = accum * blocks * tp_per_block * all_to_all_s(links, plan.ep_group, routed)
    # DualPipe runs one chunk's all-to-all while another computes: only the excess waits.
    ep_exposed = max(0.0, ep_comm - accum * stage.total_s) if plan.overlaps_expert_all_to_all else ep_comm
    if plan.expert_exchange and plan.dispatch_host_wait_s:
        # A dispatcher that waits on the host for its token counts: the GPU idles, nothing overlaps it.
        dispatches = 2 if forward_again else 1  # the forward's, and a recomputation's (token_dispatch.py)
        host_wait = accum * blocks * dispatches * plan.dispatch_host_wait_s
        ep_comm += host_wait
        ep_exposed += host_wait

    # Context parallelism (as our engine runs it): each block all-gathers the sequence's keys and values over
    # the cp ranks in forward (again when full or op-level checkpointing recomputes it) and reduce-scatters their
    # gradients in backward, the same volume; not overlapped with the attention. A ring (Megatron-LM) moves
    # the same bytes a chunk at a time under the attention of the chunk before: only the excess waits.
    cp_comm = 0.0
    if plan.cp > 1:
        gathered = 2 * micro_batch * plan.seq_len * plan.kv_width / tp * plan.element
        passes = 2 + (1 if forward_again else 0)
        cp_comm = accum * blocks * passes * all_gather_s(links, plan.cp_group, gathered)
    cp_exposed = max(0.0, cp_comm - accum * stage.attention_s) if plan.overlaps_context_exchange else cp_comm

    p2p = 0.0
    if plan.p2p_split:
        message = activation_bytes / plan.p2p_split
        if plan.serial_pipeline_transfers:
            transfers = float(deepspeed_critical_transfers(accum, plan.pipeline_stages))
        else:
            transfers = accum * 2.0 * plan.virtual_stages
        p2p = transfers * point_to_point_s(links, message, plan.crosses_nodes)

    # DeepSpeed's cpu_checkpointing (deepspeed/runtime/activation_checkpointing/checkpointing.py at 0d4a54a0, the
    # ZeRO-Infinity release): each checkpoint, partitioned over the tp ranks (--partition-activations), is copied
    # into a pageable CPU buffer on the compute stream in the forward (`.data.copy_(partition.data)`) and back to
    # the GPU before its recomputation (get_full_inputs; the transport-stream line is commented out): both ways
    # on the critical path.
    if checkpointing is ActivationCheckpointing.FULL and plan.checkpoints_to_cpu and plan.pcie_Bps > 0:
        copied = accum * blocks * plan.checkpoints_to_cpu * activation_bytes / tp
        offload += 2 * copied / plan.pcie_Bps

    # By position, in StepComm's field order: keywords cost a name match each, for every candidate.
    return StepComm(
        dp_total,  # data_parallel_s
        exposed + tp_exposed + ep_exposed + cp_exposed + p2p,  # exposed_s
        tp_comm,  # tensor_parallel_s
        p2p,  # pipeline_p2p_s
        ep_comm,  # expert_parallel_s
        cp_comm,  # context_parallel_s
        offload,  # offload_s
        optimizer_step,  # optimizer_step_s
    )
