"""Communication buffers and transiently gathered or cast parameters, per framework.

Bucket sizes are the ones our emitted configs use (deepspeed_bucket_sizes),
so the estimate describes the run the plan writes, not DeepSpeed's defaults
(5e8 elements per bucket, which alone would cost 1-2 GB per GPU).

Three moments matter: the end of forward, the start of backward (the usual
peak: every activation and the loss gradients alive) and the optimizer step;
our engine's compressed gradient sums add a fourth, the end of backward where
ZeRO-0/1 sum the buckets (compression_buffers.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.memory.rank_params import RankParams, linear_params
from planner.memory.runtime import Runtime
from planner.models.spec import ModelSpec
from planner.training_config import (
    ActivationCheckpointing,
    FsdpSharding,
    GradientCompression,
    Precision,
    Strategy,
    TrainingConfig,
)


@dataclass(frozen=True)
class DeepSpeedBuckets:
    """Elements per bucket; the same rule as the HF Trainer's "auto" values."""

    reduce_bucket_size: int  # hidden^2
    allgather_bucket_size: int  # hidden^2
    stage3_prefetch_bucket_size: int  # 0.9 hidden^2
    stage3_param_persistence_threshold: int  # 10 hidden


def deepspeed_bucket_sizes(spec: ModelSpec) -> DeepSpeedBuckets:
    h = spec.hidden_size
    return DeepSpeedBuckets(
        reduce_bucket_size=h * h,
        allgather_bucket_size=h * h,
        stage3_prefetch_bucket_size=int(0.9 * h * h),
        stage3_param_persistence_threshold=10 * h,
    )


@dataclass(frozen=True)
class Buffers:
    during_forward: float  # at the end of forward (autocast's weight-cast cache still alive)
    during_backward: float  # at the start of backward, beside every saved activation
    during_step: float  # at the optimizer step
    note: str = ""
    at_reduction: float = 0.0  # more at the end of backward, while ZeRO-0/1 sum compressed buckets


def _low_width(config: TrainingConfig) -> int:
    return 4 if config.precision is Precision.FP32 else 2


def estimate_buffers(
    spec: ModelSpec,
    config: TrainingConfig,
    params: RankParams,
    dp: int,
    runtime: Runtime = Runtime.CUDA,
    *,
    gpus_per_node: int = 1,
    fp8_weights: bool = False,
) -> Buffers:
    if config.strategy is Strategy.DDP:
        buffers = _ddp_buffers(spec, config, params, dp, runtime)
    elif config.strategy is Strategy.FSDP:
        buffers = _fsdp_buffers(config, params, dp)
    else:
        buffers = _zero_buffers(spec, config, params, dp)
        if config.zeropp:
            buffers = _with_secondary_partition(config, params, buffers, dp, gpus_per_node)
    if config.fp8 and fp8_weights:  # the FP8 weight and its transpose in place of the 16-bit one: 2 bytes either way
        note = "; ".join(filter(None, [buffers.note, "FP8: each block weight kept in FP8 with its transpose"]))
        return replace(buffers, note=note)
    return _with_fp8_weights(spec, config, params, buffers, dp) if config.fp8 else buffers


def _with_secondary_partition(
    config: TrainingConfig, params: RankParams, buffers: Buffers, dp: int, gpus_per_node: int
) -> Buffers:
    """ZeRO++'s hpZ: every node keeps the 16-bit parameters partitioned over its own GPUs as well, so that the
    backward gathers inside the node (planner/throughput/zeropp.py): 1/hpZ of them on each GPU, the whole step.
    None where the data-parallel ranks fit in one node (no hpZ there)."""
    from planner.throughput.zeropp import hpz_size  # here: only a ZeRO++ plan

    hpz = hpz_size(dp, gpus_per_node)
    if hpz == 1:
        return buffers
    secondary = params.total * _low_width(config) / hpz
    note = "; ".join(filter(None, [buffers.note, f"ZeRO++: hpZ's secondary partition (1/{hpz} of the parameters)"]))
    return Buffers(
        during_forward=buffers.during_forward + secondary,
        during_backward=buffers.during_backward + secondary,
        during_step=buffers.during_step + secondary,
        note=note,
    )


def _with_fp8_weights(
    spec: ModelSpec, config: TrainingConfig, params: RankParams, buffers: Buffers, dp: int
) -> Buffers:
    """FP8 training casts each block weight to FP8 once per step and keeps it, and its transpose (FP8 GEMMs
    take both operands K-major on Hopper), from forward through backward: 2 bytes per block matmul weight.
    Under sharded FSDP2 the FP8 weights are what is all-gathered (torchao's float8 all-gather): a gathered
    unit holds each FP8 weight and its transpose, the 2 bytes per weight its 16-bit gather held, and nothing
    of the other units outlives their use."""
    if config.strategy is Strategy.FSDP and config.fsdp_sharding is not FsdpSharding.NONE and dp > 1:
        note = "; ".join(filter(None, [buffers.note, "FP8: units all-gathered as FP8 weights and their transposes"]))
        return Buffers(buffers.during_forward, buffers.during_backward, buffers.during_step, note)
    block_linears, _ = linear_params(spec, config, params, include_experts=True)
    copies = 2.0 * block_linears
    note = "; ".join(filter(None, [buffers.note, "FP8: each block weight and its transpose cast to 1 byte"]))
    return Buffers(
        during_forward=buffers.during_forward + copies,
        during_backward=buffers.during_backward + copies,
        during_step=buffers.during_step,
        note=note,
    )


def _zero_buffers(spec: ModelSpec, config: TrainingConfig, params: RankParams, dp: int) -> Buffers:
    w = _low_width(config)
    buckets = deepspeed_bucket_sizes(spec)
    note = ""
    # Reduce bucket, double-buffered when communication overlaps backward.
    reduce = 2 * buckets.reduce_bucket_size * w if dp > 1 and config.zero_stage >= 1 else 0.0
    gather = buckets.allgather_bucket_size * w if dp > 1 and config.zero_stage in (1, 2) else 0.0
    during_backward = reduce
    if config.zero_stage == 3 and dp > 1:
        # The module being computed plus the prefetched bucket, and the module's
        # 16-bit gradient before it is reduce-scattered (DeepSpeed counts 4 bytes
        # per parameter of the largest layer for the same reason).
        gathered = (params.largest_module + buckets.stage3_prefetch_bucket_size) * w
        during_backward += gathered + params.largest_module * w
        note = "ZeRO-3: largest module gathered plus the prefetch bucket"
    if config.pipeline_parallel > 1:
        # Send and receive buffers of one micro-batch's boundary activations.
        during_backward += 2 * config.micro_batch * config.seq_len // config.context_parallel * spec.hidden_size * w
    buffers = Buffers(during_forward=during_backward, during_backward=during_backward, during_step=gather, note=note)
    if config.compression is not GradientCompression.NONE:
        buffers = _with_compression(spec, config, params, buffers, dp)
    return buffers


def _with_compression(
    spec: ModelSpec, config: TrainingConfig, params: RankParams, buffers: Buffers, dp: int
) -> Buffers:
    """Our engine's compressed sums: residuals from step to step, and the buckets' sums at the reduction
    (ZeRO-0/1 after backward, ZeRO-2/3 inside it), over the ZeRO ranks (dp x cp, over ep)."""
    if config.zero_stage == 3:  # a unit per block, and the rest (embeddings, head) as one
        largest = max(params.block, params.embedding)
    else:  # buckets of the emitted reduce_bucket_size; a larger parameter is a bucket of its own
        largest = max(deepspeed_bucket_sizes(spec).reduce_bucket_size, params.largest_module)
    from planner.memory.compression_buffers import compression_memory  # here: only a compressed plan

    ranks = config.zero_ranks(dp * config.model_parallel_size)
    held = compression_memory(config.compression, config.zero_stage, params.trainable, ranks, largest)
    note = "; ".join(filter(None, [buffers.note, held.note]))
    inside_backward = held.at_reduction if config.zero_stage >= 2 else 0.0
    return Buffers(
        during_forward=buffers.during_forward + held.residuals,
        during_backward=buffers.during_backward + held.residuals + inside_backward,
        during_step=buffers.during_step + held.residuals,
        note=note,
        at_reduction=held.at_reduction - inside_backward,
    )


def _ddp_buffers(spec: ModelSpec, config: TrainingConfig, params: RankParams, dp: int, runtime: Runtime) -> Buffers:
    grad_width = 2 if config.precision is Precision.BF16 else 4
    # DDP's reducer copies every gradient into its buckets unless
    # gradient_as_bucket_view=True; PyTorch's default is False.
    bucket_copy = params.trainable * grad_width if dp > 1 else 0.0
    notes = ["DDP gradient buckets: a copy of all gradients (gradient_as_bucket_view=False)"] if bucket_copy else []
    forward = backward = 0.0
    if config.precision.is_mixed and not config.lora_rank:
        # autocast caches a 16-bit copy of every weight a matmul reads until forward
        # ends; autograd keeps them for backward unless checkpointing recomputes them.
        include_experts = runtime.autocast_covers_experts
        block_linears, head = linear_params(spec, config, params, include_experts=include_experts)
        forward = 2 * (block_linears + head)
        # Recomputing whole blocks (full) or all but their matmul outputs (op) drops the casts till backward.
        checkpointed = config.activation_checkpointing in (ActivationCheckpointing.FULL, ActivationCheckpointing.OP)
        backward = 2 * head if checkpointed else forward
        notes.append("autocast: a 16-bit copy of every weight a matmul reads")
    return Buffers(
        during_forward=forward,
        during_backward=backward + bucket_copy,
        during_step=bucket_copy,
        note="; ".join(notes),
    )


def _fsdp_buffers(config: TrainingConfig, params: RankParams, dp: int) -> Buffers:
    if config.fsdp_sharding is FsdpSharding.NONE or dp == 1:
        return Buffers(0.0, 0.0, 0.0, "FSDP without sharding: nothing to gather")
    # MixedPrecisionPolicy(param_dtype=16-bit) all-gathers 16-bit parameters.
    param_width = _low_width(config)
    # The root unit (embeddings, head) stays gathered from forward into backward.
    root = params.embedding * param_width
    if config.fsdp_sharding is FsdpSharding.GRAD_OP:
        gathered = params.total * param_width  # kept gathered from forward to backward
        note = "SHARD_GRAD_OP keeps all 16-bit parameters gathered through backward"
    else:
        gathered = params.block * param_width + root  # the last unit, gathered again for backward
        note = "FSDP: the root unit and one transformer block gathered"
    return Buffers(during_forward=gathered, during_backward=gathered, during_step=0.0, note=note)
