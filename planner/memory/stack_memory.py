"""What the training stack, not the config, decides of a step's memory.

The memory estimate counts the tensors transformers' modules keep (traced: docs/accuracy.md, "Memory"); what a
stack does differently is counted as that stack does it, each read in its code:

- uncompiled_loss: the kernel its cross-entropy runs with, which decides what the loss holds of the logits
  (loss_kernels.py);
- compiles_loss: whether under `--kernels compile` the stack compiles its loss too, which fuses it (FUSED) for
  the models that compute their loss through one function: decoder-only ones (transformers' `loss_function`;
  encoder-decoders such as T5 and Whisper compute theirs inline in forward and keep it eager). Our runner does
  (backends/parts/kernels.py; tests/test_compiled_loss.py traces it), as do the Trainer's `torch_compile` (the
  whole model, its loss included) and torchtitan since bbb1b616e;
- checkpoints_to_cpu: under full activation checkpointing, how many checkpoints per block DeepSpeed's
  cpu_checkpointing copies to CPU memory in the forward and back before the block's recomputation (the ZeRO-Infinity
  paper's example sets it: planner/throughput/implementation.py, which also charges the copies' time). The GPU then
  holds one block's checkpoints, the one in flight, and the node's CPU memory the rest.
- unsharded_stage_under_pp: under pipeline parallelism with parameters sharded (FSDP2, ZeRO-3), whether each
  stage holds its parameters gathered and its gradients unreduced from the step's first forward to its last
  backward. torchtitan shards each block with `reshard_after_forward = False` when pipelining ("For PP, do not
  reshard after forward to avoid per-microbatch all-gathers", torchtitan/parallelisms/parallelize_llama.py at
  9dec370); torch's pipeline stages run every micro-batch's backward but the last with
  `set_reshard_after_backward(False)` and `set_requires_gradient_sync(False)` (torch/distributed/pipelining/
  stage.py, `backward_maybe_with_nosync`, in the torch installed here and in stored copies of earlier versions), and
  FSDP2 accumulates unreduced gradients in its reduce dtype (`to_accumulated_grad_if_needed`,
  torch/distributed/fsdp/_fully_shard/_fsdp_param.py), fp32 in torchtitan (`mixed_precision_reduce` defaults to
  float32, torchtitan/config_manager.py at 9dec370). So until the step's reduce-scatter the stage holds every
  parameter in the compute width and every trainable one's gradient in 4 bytes, beside the shards; under FP8 the
  block matmuls' weights are gathered as FP8 (torchtitan's 405B config sets enable_fsdp_float8_all_gather), which
  buffers.py already counts (each weight and its transpose, 1 byte each), so only the rest is counted here in
  16 bits. The gradients, held whole, replace the sharded ones accumulated between micro-batches. Read, not traced;
  our engine refuses ZeRO-3 with pipelining.
- shards_dense_over_data_parallel: with experts split (MoE under expert parallelism), whether the ZeRO-sharded
  states of the dense parameters split over every data-parallel rank and only the experts' over the
  expert-data-parallel group (dp / ep ranks). Megatron-Core's distributed optimizer does: get_megatron_optimizer
  builds one optimizer for the dense parameters over the data-parallel (x context-parallel) group and one for the
  experts over the expert-data-parallel group (megatron/core/optimizer/__init__.py at d98e8a64). Our engine runs
  its ZeRO on the expert-data-parallel group for all of them (backends/expert_parallel).
- gradient_buffer: Megatron's gradients live in one contiguous buffer, allocated when the model is wrapped and
  zeroed each step, so held from the first forward whatever the accumulation, and never sharded (its distributed
  optimizer shards the optimizer's states alone; param_and_grad_buffer.py); in bf16 training the buffer is fp32, 4
  bytes a parameter, which the optimizer steps from (its fp32 main gradients are views of it: no copy beside); and
  its Adam is fused (Transformer Engine's FusedAdam, else apex's: megatron/core/optimizer/__init__.py), stepping in
  place. Megatron's own table (docs/user-guide/features/dist_optimizer.md at d98e8a64): bf16 parameters with fp32
  gradients 18 bytes a parameter, 6 + 12/d distributed; fp16 with fp16 gradients 20, 4 + 16/d. Counted on the
  layouts Megatron runs (ZeRO-0 and ZeRO-1, model_states.megatron_gradient_buffer); a preset used for a ZeRO-3 run
  keeps the engine's sharding there. The fp32 buffer under bf16: Megatron-LM's command line sets it
  (`accumulate_allreduce_grads_in_fp32`, megatron/arguments.py at 2755bcb8, megatron/training/arguments.py at
  d98e8a64; the buffer's dtype, megatron/core/distributed/param_and_grad_buffer.py), as Megatron-Bridge's
  mixed-precision configs do (`grad_reduce_in_fp32 = True`, MixedPrecisionConfig's default and bf16_mixed's,
  src/megatron/bridge/training/mixed_precision.py at 067f987d).
  Our engine keeps 16-bit gradients and an fp32 copy of its partition (model_states.py).
- fp8_weights: under FP8, the block weights are kept in FP8 (with their transposes) instead of beside a 16-bit copy
  the FP8 casts come from: 2 bytes a block weight either way, where a stack that casts keeps 4 (buffers.py).
  Megatron-Bridge's FP8 and MXFP8 configs set `fp8_param_gather = True` (bf16_with_fp8_current_scaling_mixed and
  bf16_with_mxfp8_mixed, training/mixed_precision.py at 067f987d, the ones scripts/performance/utils/precision.py
  picks), which keeps Megatron-Core's compute parameters in FP8: an assumption taken from those recipes for every
  megatron-core FP8 plan (Megatron-LM's --fp8-param-gather is off by default, Bridge's blockwise config too).
- te_blocks: the blocks are Megatron-Core's with Transformer Engine, which keep fewer tensors than transformers'
  (te_blocks.py, read in their code).
- gelu_keeps_input: a GELU MLP's activation keeps its input alone (and fc2 the GELU's output), where transformers'
  tanh GELU (gelu_new, gelu_fast) keeps its Python chain's intermediates too. Megatron's GPT MLP runs its fused
  bias-GELU by default (`GeLUFunction.forward` saves input and bias; --no-bias-gelu-fusion falls back to torch's
  F.gelu, a native op that also keeps its input alone; only --openai-gelu, which none of its example scripts set,
  would keep more): megatron/model/fused_bias_gelu.py, transformer.py and arguments.py at 2755bcb8 (June 2022,
  Korthikanti et al.'s code) and e270f68a (April 2021); Korthikanti et al. 2022 count its MLP so (19 sbh). On in
  the Megatron-LM, Megatron-Core, Megatron-DeepSpeed and DeepSpeed-with-Megatron-GPT presets.

planner/throughput/implementation.py's presets say which each codebase runs (Implementation.stack_memory); ours
is OURS: the eager loss, compiled under `--kernels compile`, checkpoints on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.contract.choices import KernelChoice
from planner.memory.loss_kernels import LossKernel
from planner.memory.rank_params import linear_params, rank_params
from planner.models.spec import ModelFamily, ModelSpec
from planner.training_config import ActivationCheckpointing, TrainingConfig


@dataclass(frozen=True)
class StackMemory:
    uncompiled_loss: LossKernel = LossKernel.EAGER  # the loss's kernel without --kernels compile: read loss_kernel()
    checkpoints_to_cpu: int = 0
    unsharded_stage_under_pp: bool = False
    compiles_loss: bool = False
    shards_dense_over_data_parallel: bool = False
    gradient_buffer: bool = False
    fp8_weights: bool = False
    te_blocks: bool = False
    gelu_keeps_input: bool = False

    def loss_kernel(self, spec: ModelSpec, config: TrainingConfig) -> LossKernel:
        """The kernel this config's cross-entropy runs with: fused where the stack compiles a decoder-only model's
        loss under --kernels compile, else the stack's own (Liger's chunked loss is the config's: activation_batch)."""
        compiled = self.compiles_loss and config.kernels is KernelChoice.COMPILE
        return LossKernel.FUSED if compiled and spec.family is ModelFamily.DECODER_ONLY else self.uncompiled_loss


OURS = StackMemory(compiles_loss=True)

# The gradients' and the buffers' sources where gradient_buffer and fp8_weights apply (estimate.py).
FP32_GRADIENT_BUFFER = (
    "accumulated and reduced in one fp32 buffer the optimizer steps from, as Megatron keeps them (read in its code: "
    "planner/memory/stack_memory.py)"
)
FP8_WEIGHTS = (
    "the block weights kept in FP8 with their transposes, no 16-bit copy beside, as Megatron-Bridge's FP8 performance "
    "recipes keep them (fp8_param_gather, assumed for every megatron-core FP8 plan: planner/memory/stack_memory.py)"
)
# The optimizer states' source where shards_dense_over_data_parallel applies (planner/memory/estimate.py).
DENSE_OVER_DATA_PARALLEL = (
    "the dense parameters' states over every data-parallel rank, the experts' over the expert-data-parallel group, "
    "as Megatron-Core's distributed optimizer shards them (read in its code: planner/memory/stack_memory.py)"
)


def moves_checkpoints_to_cpu(spec: ModelSpec, config: TrainingConfig, stack: StackMemory) -> bool:
    """Whether full checkpointing's checkpoints go to CPU memory (checkpoints_to_cpu): DeepSpeed's Megatron GPTs
    ran it; an encoder-decoder's two stacks were not read."""
    full = config.activation_checkpointing is ActivationCheckpointing.FULL
    return bool(stack.checkpoints_to_cpu) and full and spec.family is not ModelFamily.ENCODER_DECODER


def unsharded_stage_bytes(
    spec: ModelSpec, config: TrainingConfig, stack: StackMemory, parameters_sharded: bool, width: int
) -> float:
    """Per rank, what a pipelined stage holds unsharded from its first forward to its last backward
    (unsharded_stage_under_pp): its parameters at `width` bytes (FP8-gathered matmul weights excepted) and its
    trainable parameters' gradients in fp32; 0 without pipelining, without sharded parameters, or for a stack
    that reshards."""
    if not stack.unsharded_stage_under_pp or config.pipeline_parallel == 1:
        return 0.0
    if not parameters_sharded:
        return 0.0
    params = rank_params(spec, config)
    in_16_bits = params.total
    if config.fp8:
        in_16_bits -= linear_params(spec, config, params, include_experts=True)[0]
    return in_16_bits * width + params.trainable * 4


def unsharded_stage_note(held: float) -> str:
    return (
        "pipelined FSDP as torchtitan runs it: the stage's parameters gathered and its gradients unreduced (fp32) "
        f"until the step's last backward, {held / 2**30:.1f} GiB (planner/memory/stack_memory.py)"
    )
