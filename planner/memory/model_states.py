"""Parameters, gradients and optimizer states per rank, as each framework lays them out.

Two layouts of mixed precision exist in practice, and they differ by 2-4
bytes per parameter:

- PyTorch-native (DDP with autocast, FSDP with a MixedPrecisionPolicy): the
  stored parameters are fp32 and are the optimizer's master weights; gradients
  are fp32 (FSDP reduces in fp32). 16-bit copies of the weights exist only
  while a unit computes (counted as buffers).
- DeepSpeed ZeRO and our engine: 16-bit parameters and gradients, plus fp32
  master weights, fp32 gradient partitions and optimizer states in the
  optimizer's shards (DeepSpeed's own estimators: "2 = params_16bit, 18 =
  2_grads_16bit + 4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit").

DeepSpeed has no pure bf16 and no master-free fp32: with `bf16: {enabled: true}`
its ZeRO optimizers keep fp32 master weights, fp32 gradient partitions and fp32
Adam states (the mixed layout above), and at fp32 ZeRO stages 1-2 still clone the
fp32 partition as a master copy, and so does ZeRO-3 (its alias check at
stage3.py:1162-1167 compares a torch.device with a string, never equal). Our engine's ZeRO
has no pure bf16 and no master-free fp32 either: it always builds the fp32 flat master
partition and steps it, so its optimizer states are fp32 (backends/zero/optimizer.py); only
ZeRO-3 at fp32, with the master beside the weights, uses the master as the sharded weights
(stage3.py place_parameters), and there nothing extra is held. Measured per rank after one
step on 2 CPU ranks, DeepSpeed's and the engine's in one launch (docs/accuracy.md).

Sharding follows the strategy: DDP and FSDP NO_SHARD replicate everything;
FSDP FULL_SHARD and SHARD_GRAD_OP shard all three over the data-parallel group,
HYBRID_SHARD over the ranks of one node; ZeRO stage 1 shards the optimizer
states (with master and fp32 gradients), stage 2 also the 16-bit gradients,
stage 3 also the 16-bit parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.memory.rank_params import QLORA_BYTES_PER_PARAM, RankParams
from planner.memory.runtime import Runtime
from planner.memory.stack_memory import StackMemory
from planner.training_config import FsdpSharding, Offload, OptimizerKind, Precision, Strategy, TrainingConfig

# bitsandbytes 8-bit Adam: two uint8 states plus one fp32 absmax per 2048-value block.
ADAMW_8BIT_BYTES = 2 + 2 * 4 / 2048
# DeepSpeed ZeRO-3 steps the optimizer one sub-group at a time and makes the
# fp32 gradients of that sub-group only ("sub_group_size", default 1e9 elements).
ZERO3_SUB_GROUP_ELEMENTS = 1_000_000_000
# torch's single-tensor AdamW (its path on CPU tensors) holds exp_avg_sq.sqrt() and that root's quotient by the
# bias correction at once, for the one tensor it steps (torch/optim/adam.py:544, torch 2.13): that tensor's bytes
# twice. Measured 2.00 x GPT-2's wte over a step (benchmarks/memory/optimizer_step_transient.py).
SINGLE_TENSOR_ADAM_TEMPORARIES = 2


@dataclass
class ShardDegrees:
    """Over how many ranks each kind of state is split (1 = replicated)."""

    parameters: int
    gradients: int
    optimizer: float  # a dense/expert mix under Megatron-Core's distributed optimizer (_dense_over_data_parallel)


@dataclass
class ModelStates:
    """Bytes on one GPU, and what that rank keeps in CPU memory or on NVMe."""

    parameters: float
    gradients: float  # everything alive at the optimizer step (16-bit, plus fp32 where kept)
    optimizer_states: float
    backward_gradients: float = 0.0  # made by backward (16-bit; DeepSpeed's fp32 copy comes at the step)
    step_temporary: float = 0.0  # AdamW's temporaries during the step (foreach: the group's; on CPU: one tensor's)
    cpu: float = 0.0
    nvme: float = 0.0
    notes: list[str] = field(default_factory=list)


def uses_native_mixed_precision(config: TrainingConfig) -> bool:
    """True where the stored fp32 parameters double as the master weights."""
    return config.strategy is Strategy.DDP or config.strategy is Strategy.FSDP


# What --precision bf16 means where the optimizer keeps its own fp32 copy (the branch in model_state_bytes).
BF16_RUNS_MIXED = (
    "--precision bf16 runs as bf16-mixed here: DeepSpeed has no pure bf16 (its ZeRO optimizers and our engine's keep "
    "fp32 master weights, gradient partitions and Adam states), so it is counted and emitted as bf16-mixed is"
)


def runs_bf16_as_mixed(config: TrainingConfig) -> bool:
    """True where --precision bf16 gets fp32 master weights anyway: DeepSpeed and our engine (BF16_RUNS_MIXED)."""
    return config.precision is Precision.BF16 and config.strategy in (Strategy.DEEPSPEED, Strategy.ENGINE)


def shard_degrees(config: TrainingConfig, dp: int, gpus_per_node: int) -> ShardDegrees:
    # Every cp rank holds the whole model, so sharding runs over the dp x cp ranks (our engine's ZeRO,
    # backends/context_parallel; FSDP2 over the dp x cp mesh as torchtitan and our traces shard it).
    dp *= config.context_parallel
    if config.strategy is Strategy.DDP:
        return ShardDegrees(1, 1, 1)
    if config.strategy is Strategy.FSDP:
        degree = {
            FsdpSharding.FULL: dp,
            FsdpSharding.GRAD_OP: dp,
            FsdpSharding.HYBRID: min(dp, gpus_per_node),
            FsdpSharding.NONE: 1,
        }[config.fsdp_sharding]
        return ShardDegrees(degree, degree, degree)
    stage = config.zero_stage
    if config.strategy is Strategy.ENGINE and config.expert_parallel > 1:
        dp //= config.expert_parallel  # our ZeRO runs on the expert-data-parallel group (backends/expert_parallel)
    return ShardDegrees(
        parameters=dp if stage >= 3 else 1,
        gradients=dp if stage >= 2 else 1,
        optimizer=dp if stage >= 1 else 1,
    )


def megatron_gradient_buffer(config: TrainingConfig, stack: StackMemory) -> bool:
    """Whether Megatron's gradient buffer is counted: its stack, on our engine's layouts that are Megatron's own
    (ZeRO-0, DDP, and ZeRO-1, its distributed optimizer); under ZeRO-2/3 the engine's sharding is counted."""
    return stack.gradient_buffer and config.strategy is Strategy.ENGINE and config.zero_stage <= 1


def fp32_gradient_buffer(config: TrainingConfig, stack: StackMemory) -> bool:
    """Megatron's gradient buffer in fp32: under bf16 (stack_memory.py)."""
    return megatron_gradient_buffer(config, stack) and config.precision in (Precision.BF16_MIXED, Precision.BF16)


def dense_over_data_parallel(config: TrainingConfig, stack: StackMemory) -> bool:
    """Whether the optimizer's dense states split over every data-parallel rank apart from the experts' (MoE under
    our engine's ZeRO with experts split); under LoRA the adapters are not told apart by kind."""
    split_experts = config.strategy is Strategy.ENGINE and config.expert_parallel > 1 and config.zero_stage >= 1
    return stack.shards_dense_over_data_parallel and split_experts and not config.lora_rank


def _dense_over_data_parallel(shards: ShardDegrees, params: RankParams, ranks: int) -> ShardDegrees:
    """The optimizer's degree when its dense parameters' share is split over all `ranks` and the experts' over the
    expert-data-parallel group (`shards`' degree): the one divisor that gives the two parts' sum. Megatron-Core's
    distributed optimizer shards the optimizer's states alone (ZeRO-1): parameters and gradients stay as our ZeRO
    stage keeps them."""
    dense = params.trainable - params.experts
    optimizer = params.trainable / (dense / ranks + params.experts / shards.optimizer)
    return ShardDegrees(shards.parameters, shards.gradients, optimizer)


def optimizer_state_bytes_per_param(optimizer: OptimizerKind, state_width: int, fan_in_out_ratio: float) -> float:
    """Bytes of optimizer state per trainable parameter (master weights excluded).

    fan_in_out_ratio approximates Adafactor's factored second moment, which
    keeps one row and one column vector per matrix: (r + c) / (r * c) per value.
    """
    if optimizer is OptimizerKind.ADAMW:
        return 2 * state_width  # exp_avg and exp_avg_sq
    if optimizer is OptimizerKind.ADAMW_8BIT:
        return ADAMW_8BIT_BYTES
    if optimizer is OptimizerKind.ADAFACTOR:
        return state_width * fan_in_out_ratio  # no momentum (beta1=None, the default)
    return state_width  # SGD momentum buffer, or Lion's single momentum


def model_state_bytes(
    params: RankParams,
    config: TrainingConfig,
    dp: int,
    gpus_per_node: int,
    hidden_size: int,
    runtime: Runtime = Runtime.CUDA,
    stack: StackMemory = StackMemory(),
) -> ModelStates:
    """stack: what the training stack decides of the model states beyond the strategy (stack_memory.py)."""
    precision = config.precision
    native = uses_native_mixed_precision(config)
    shards = shard_degrees(config, dp, gpus_per_node)
    if dense_over_data_parallel(config, stack):
        shards = _dense_over_data_parallel(shards, params, dp * config.context_parallel)
    lora = config.lora_rank > 0

    # Width of the stored weights, the gradients, and the optimizer's states.
    deepspeed = config.strategy is Strategy.DEEPSPEED
    engine = config.strategy is Strategy.ENGINE
    if precision is Precision.FP32:
        # DeepSpeed ZeRO 1-2 clone the fp32 partition into single_partition_of_fp32_groups even when the
        # parameters are fp32 (stage_1_and_2.py:560-577). ZeRO-3 means to alias it (stage3.py:1162-1167) but
        # compares tensor.device with self.device, a string (stage3.py:333), which is never equal: it copies.
        # Our engine always builds its fp32 flat master partition (backends/zero/optimizer.py, ZeroOptimizer
        # .__init__); only ZeRO-3 with the master beside the weights makes it the local shard (stage3.py
        # place_parameters): there the sharded weights are the master.
        master_width = 4 if deepspeed or (engine and not _engine_master_is_the_shard(config)) else 0
        weight_width, grad_width, state_width = 4, 4, 4
    elif runs_bf16_as_mixed(config):
        # DeepSpeed has no pure bf16: `bf16: {enabled: true}` keeps fp32 master weights, fp32 gradient
        # partitions and fp32 Adam states (master_weights_and_grads_dtype defaults to fp32,
        # base_optimizer.py:484-; stage_1_and_2.py:336, stage3.py:304). Nor has our engine: its optimizer
        # steps the fp32 flat master, so its states are fp32 too (backends/zero/optimizer.py).
        weight_width, grad_width, master_width, state_width = 2, 2, 4, 4
    elif precision is Precision.BF16:
        weight_width, grad_width, master_width, state_width = 2, 2, 0, 2
    elif native:
        weight_width, grad_width, master_width, state_width = 4, 4, 0, 4
    else:
        weight_width, grad_width, master_width, state_width = 2, 2, 4, 4
    # DeepSpeed and our engine also keep an fp32 copy of the gradient partition.
    fp32_grad_width = 4 if master_width else 0
    # Megatron's gradient buffer (stack_memory.py) under the layouts Megatron runs: DDP and its distributed optimizer.
    buffer = megatron_gradient_buffer(config, stack)
    if fp32_gradient_buffer(config, stack):
        grad_width, fp32_grad_width = 4, 0  # the fp32 buffer is the optimizer's gradient: no copy beside it

    trainable = params.trainable
    if lora:
        # The frozen base is stored at the compute width (4-bit under QLoRA), the
        # adapters like any trainable weights. Nothing frozen has gradients.
        base_width = 4 if precision is Precision.FP32 else 2
        frozen_bytes = (params.total - params.quantized) * base_width + params.quantized * QLORA_BYTES_PER_PARAM
        weights = frozen_bytes / shards.parameters + trainable * weight_width / shards.parameters
    else:
        weights = trainable * weight_width / shards.parameters

    grads16 = trainable * grad_width / shards.gradients
    # Adafactor factors matrices of about hidden x hidden: (2h) / h^2 values per parameter.
    states_per_param = optimizer_state_bytes_per_param(config.optimizer, state_width, 2 / hidden_size)
    optimizer = trainable * (master_width + states_per_param) / shards.optimizer
    fp32_partition = trainable / shards.optimizer
    if config.strategy is Strategy.DEEPSPEED and config.zero_stage == 3:
        fp32_partition = min(fp32_partition, ZERO3_SUB_GROUP_ELEMENTS)
    fp32_grads = fp32_partition * fp32_grad_width

    states = ModelStates(
        parameters=weights,
        gradients=grads16 + fp32_grads,
        optimizer_states=optimizer,
        backward_gradients=grads16,
        # Megatron's fused Adam (Transformer Engine's or apex's) steps in place (stack_memory.py).
        step_temporary=0.0 if buffer else _step_temporary(config, params, shards, fp32_partition, state_width, runtime),
    )
    _apply_offload(states, config, grads16, fp32_grads)
    states.cpu += host_step_temporary(config, params, shards, state_width, runtime)
    return states


def _engine_master_is_the_shard(config: TrainingConfig) -> bool:
    """Our ZeRO-3 at fp32 with the master on the weights' device: the master is each unit's local shard."""
    return config.zero_stage >= 3 and config.offload_optimizer is Offload.NONE


def _step_temporary(
    config: TrainingConfig,
    params: RankParams,
    shards: ShardDegrees,
    fp32_partition: float,
    state_width: int,
    runtime: Runtime,
) -> float:
    """What torch.optim.AdamW allocates during its step beyond the states. SGD, Lion and 8-bit Adam update in
    place; an offloaded step runs on the CPU (its temporaries are not a GPU's; the cpu device's RAM is that CPU's:
    there they are charged as without offload, at the optimizer step).

    foreach (the CUDA default) takes the square root of every exp_avg_sq at once: one more state-sized tensor.
    DeepSpeed's fused Adam works in place.

    On the cpu device torch steps one tensor at a time (runtime.py), making that tensor's temporaries
    (SINGLE_TENSOR_ADAM_TEMPORARIES of its bytes), so the step peaks at the largest tensor it steps: DDP's largest
    parameter (the largest module's, its bias included), FSDP2's dim-0 shard of it; DeepSpeed's flat fp32
    partition, which it hands torch's AdamW on the CPU (backends/adapters/deepspeed_adapter.py;
    stage_1_and_2.py:584, bf16_optimizer.py:225, ZeRO-3 one sub-group at a time; measured 3 x the partition on one
    CPU rank, its fp32 gradient, counted above, and these two). Our engine's flat master is
    stepped chunk by chunk in place (backends/parts/chunked_adamw.py): no shard-sized temporary."""
    if _step_temporary_is_zero(config, runtime):
        return 0.0
    if runtime.foreach_optimizer:
        return 0.0 if config.strategy is Strategy.DEEPSPEED else params.trainable / shards.optimizer * state_width
    if config.strategy is Strategy.ENGINE:
        return 0.0
    if _steps_a_flat_partition(config):
        return SINGLE_TENSOR_ADAM_TEMPORARIES * fp32_partition * 4
    largest = min(params.largest_module, params.trainable)  # under LoRA, at most the adapters
    return SINGLE_TENSOR_ADAM_TEMPORARIES * largest / shards.parameters * state_width


def host_step_temporary_applies(config: TrainingConfig, runtime: Runtime) -> bool:
    """A GPU rank's FSDP CPU offload stepping torch's AdamW on the host (host_step_temporary)."""
    offloaded = Offload.CPU in (config.offload_optimizer, config.offload_params)
    return (
        offloaded
        and config.strategy is Strategy.FSDP
        and config.optimizer is OptimizerKind.ADAMW
        and not runtime.memory_is_host
    )


def host_step_temporary(
    config: TrainingConfig, params: RankParams, shards: ShardDegrees, state_width: int, runtime: Runtime
) -> float:
    """Host RAM a GPU rank's offloaded optimizer step makes beyond its states, at the step.

    FSDP's CPU offload steps torch's AdamW on CPU-resident shards, where foreach is not the default (its
    devices are CUDA's kind, torch/optim/optimizer.py _default_to_fused_or_foreach), so the step runs one
    tensor at a time with the cpu device's temporaries: SINGLE_TENSOR_ADAM_TEMPORARIES x the largest
    parameter shard (measured on the CPU: benchmarks/memory/optimizer_step_transient.py). DeepSpeed's
    offload steps DeepSpeedCPUAdam in place, and our engine's chunked step makes no shard-sized temporary;
    on the cpu device the step's temporaries are already the device's own (_step_temporary)."""
    if not host_step_temporary_applies(config, runtime):
        return 0.0
    largest = min(params.largest_module, params.trainable)  # under LoRA, at most the adapters
    return SINGLE_TENSOR_ADAM_TEMPORARIES * largest / shards.parameters * state_width


def _steps_a_flat_partition(config: TrainingConfig) -> bool:
    """DeepSpeed hands torch's optimizer one flat fp32 tensor per group, save at fp32 without ZeRO (its plain
    optimizer then steps the module's parameters)."""
    return config.strategy is Strategy.DEEPSPEED and (config.zero_stage > 0 or config.precision is not Precision.FP32)


def step_temporary_source(config: TrainingConfig, runtime: Runtime) -> str:
    """The optimizer step's temporaries on the cpu device, in words, for the optimizer states' source ("" where
    the cpu device's single-tensor step is not what runs)."""
    if runtime.foreach_optimizer or _step_temporary_is_zero(config, runtime) or config.strategy is Strategy.ENGINE:
        return ""
    tensor = (
        "the flat fp32 partition DeepSpeed steps"
        if _steps_a_flat_partition(config)
        else "the largest parameter (shard) it steps"
    )
    return (
        f"; at the optimizer step also torch's single-tensor AdamW temporaries, {SINGLE_TENSOR_ADAM_TEMPORARIES} x "
        f"{tensor} (torch/optim/adam.py:544, measured: benchmarks/memory/optimizer_step_transient.py)"
    )


def _step_temporary_is_zero(config: TrainingConfig, runtime: Runtime) -> bool:
    """Not AdamW (SGD, Lion and 8-bit Adam update in place), or offloaded off a GPU (the step runs on the host's
    CPU, not in the device's memory; on the cpu device it runs in the same RAM, with the same temporaries)."""
    offloaded = config.offload_optimizer is not Offload.NONE or config.offload_params is not Offload.NONE
    return config.optimizer is not OptimizerKind.ADAMW or (offloaded and not runtime.memory_is_host)


def _apply_offload(states: ModelStates, config: TrainingConfig, grads16: float, fp32_grads: float) -> None:
    """Move what each framework offloads from the GPU figures to CPU or NVMe."""
    if config.strategy is Strategy.FSDP:
        if Offload.CPU in (config.offload_optimizer, config.offload_params):
            # FSDP's CPU offload keeps sharded parameters and gradients on the CPU
            # and steps the optimizer there; the GPU holds gathered units only.
            # (A step temporary is left only on the cpu device, where it is the step's own, in the same RAM.)
            states.cpu += states.parameters + states.gradients + states.optimizer_states
            states.parameters = states.gradients = states.optimizer_states = 0.0
            states.backward_gradients = 0.0
            states.notes.append("FSDP CPU offload: sharded parameters, gradients and optimizer on CPU")
        return
    if config.offload_optimizer is not Offload.NONE:
        moved = states.optimizer_states + fp32_grads
        if config.zero_stage >= 2:
            # Stage 2 offload copies each reduced gradient straight into the fp32
            # partition on the CPU; stage 3 also keeps its 16-bit gradient partition
            # there (grad_partitions_flat_buffer, pinned when the optimizer is offloaded).
            # Without an fp32 copy (fp32 or pure bf16 training) the CPU partition holds
            # the reduced gradients at their own width: it leaves the GPU, not the rank.
            if config.zero_stage == 3 or not fp32_grads:
                moved += grads16
            states.gradients = states.backward_gradients = 0.0
        else:
            states.gradients -= fp32_grads
        states.optimizer_states = 0.0
        target = "nvme" if config.offload_optimizer is Offload.NVME else "cpu"
        if target == "nvme":
            states.nvme += moved
        else:
            states.cpu += moved
        states.notes.append(f"optimizer offload to {target}: master weights, states and fp32 gradients")
    if config.offload_params is not Offload.NONE:
        if config.offload_params is Offload.NVME:
            states.nvme += states.parameters
        else:
            states.cpu += states.parameters
        states.parameters = 0.0
        states.notes.append(f"parameter offload to {config.offload_params.value}")
