"""Communication buffers and transiently gathered parameters, per framework.

Bucket sizes are the ones our emitted configs use (deepspeed_bucket_sizes),
so the estimate describes the run the plan writes, not DeepSpeed's defaults
(5e8 elements per bucket, which alone would cost 1-2 GB per GPU).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model_spec import ModelSpec
from ..training_config import FsdpSharding, Offload, Precision, Strategy, TrainingConfig
from .rank_params import RankParams


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


@dataclass
class Buffers:
    during_backward: float  # alive while activations are
    during_step: float  # alive at the optimizer step
    notes: list[str] = field(default_factory=list)


def _low_width(config: TrainingConfig) -> int:
    return 4 if config.precision is Precision.FP32 else 2


def estimate_buffers(spec: ModelSpec, config: TrainingConfig, params: RankParams, dp: int) -> Buffers:
    w = _low_width(config)
    if config.strategy is Strategy.DDP:
        return _ddp_buffers(config, params, dp)
    if config.strategy is Strategy.FSDP:
        return _fsdp_buffers(config, params, dp, w)
    buckets = deepspeed_bucket_sizes(spec)
    notes = []
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
        notes.append("ZeRO-3: largest module gathered plus the prefetch bucket")
    if config.offload_optimizer is not Offload.NONE:
        notes.append("optimizer offload: gradients leave the GPU bucket by bucket")
    if config.pipeline_parallel > 1:
        # Send and receive buffers of one micro-batch's boundary activations.
        during_backward += 2 * config.micro_batch * config.seq_len * spec.hidden_size * w
    return Buffers(during_backward=during_backward, during_step=gather, notes=notes)


def _ddp_buffers(config: TrainingConfig, params: RankParams, dp: int) -> Buffers:
    notes = []
    grad_width = 2 if config.precision is Precision.BF16 else 4
    # DDP's reducer copies every gradient into its buckets unless
    # gradient_as_bucket_view=True; PyTorch's default is False.
    bucket_copy = params.trainable * grad_width if dp > 1 else 0.0
    if bucket_copy:
        notes.append("DDP gradient buckets: a copy of all gradients (gradient_as_bucket_view=False)")
    autocast_copies = 0.0
    if config.precision.is_mixed:
        # autocast caches a 16-bit copy of every weight for the whole forward and
        # backward (the linears save it); 2 bytes per parameter.
        autocast_copies = params.total * 2
        notes.append("autocast keeps a 16-bit copy of every weight through backward")
    return Buffers(during_backward=bucket_copy + autocast_copies, during_step=bucket_copy, notes=notes)


def _fsdp_buffers(config: TrainingConfig, params: RankParams, dp: int, w: int) -> Buffers:
    notes = []
    if config.fsdp_sharding is FsdpSharding.NONE or dp == 1:
        return Buffers(0.0, 0.0, ["FSDP without sharding: nothing to gather"])
    param_width = w if config.precision is not Precision.FP32 else 4
    reduce_width = 4 if config.precision is not Precision.BF16 else 2  # reduce_dtype fp32
    unit = params.block
    # The root unit (embeddings and head) is not resharded after forward.
    root = params.embedding * param_width
    if config.fsdp_sharding is FsdpSharding.GRAD_OP:
        gathered = params.total * param_width  # kept gathered from forward to backward
        notes.append("SHARD_GRAD_OP keeps all 16-bit parameters gathered through backward")
    else:
        gathered = 2 * unit * param_width + root  # current and prefetched unit, and the root
        notes.append("FSDP: current and prefetched unit gathered, root unit kept")
    unsharded_grad = unit * reduce_width  # one unit's full gradient before reduce-scatter
    return Buffers(during_backward=gathered + unsharded_grad, during_step=0.0, notes=notes)
