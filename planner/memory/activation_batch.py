"""Activation memory of one micro-batch and accumulation, from what a layout keeps per token.

The search estimates the memory of many candidates that differ only in the
micro-batch and the accumulation: what they share (per-token bytes from
activations.py, the pipeline's stage map, the loss's kind) is gathered once
per layout and checkpointing level (activation_terms), and each candidate
costs only activations_at's arithmetic. estimate_activations is the two in one.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.memory.activations import ActivationShape, Widths, _per_token, op_kept_bytes, vision_tower_bytes
from planner.memory.arch_traits import arch_traits
from planner.memory.lora_targets import rebuilt_expert_bytes
from planner.memory.loss_kernels import LossKernel, loss_bytes
from planner.memory.op_checkpointing import last_output_bytes_per_token
from planner.memory.stack_memory import OURS, StackMemory, moves_checkpoints_to_cpu
from planner.models.spec import ModelSpec
from planner.training_config import ActivationCheckpointing, KernelChoice, PipelineSchedule, TrainingConfig


@dataclass
class ActivationEstimate:
    activations: float  # saved for backward on the most loaded rank, all micro-batches in flight
    loss_backward: float  # what the loss holds while its backward runs (loss_kernels.py)
    loss_forward: float  # what it holds at the forward's end, the logits included
    recompute: float  # one block rebuilt under full or op-level checkpointing, during backward
    per_layer: float  # one block, one micro-batch, as stored
    micro_batches_in_flight: float
    last_pipeline_stage: bool = False  # the pipeline's last stage (head and loss) is the most loaded
    on_cpu: float = 0.0  # full checkpointing's checkpoints the stack keeps in CPU memory (stack_memory.py)


def _in_flight(pp: int, schedule: PipelineSchedule, virtual_stages: int, m: int) -> float:
    """Micro-batches whose activations the first pipeline stage holds at once (m: the accumulation)."""
    if pp == 1:
        return 1.0
    if schedule is PipelineSchedule.GPIPE:
        return float(m)
    in_flight = float(min(pp, m))
    if schedule is PipelineSchedule.INTERLEAVED:
        in_flight *= 1 + (pp - 1) / (pp * virtual_stages)  # Korthikanti Eq. 5 multiplier
    return in_flight


def estimate_activations(spec: ModelSpec, config: TrainingConfig, widths: Widths) -> ActivationEstimate:
    return activations_at(activation_terms(spec, config, widths), config.micro_batch, config.grad_accum)


@dataclass(slots=True)
class ActivationTerms:
    """What estimate_activations reads of a config but its batch: the search's memory estimates of one layout
    and checkpointing level differ only in the micro-batch and the accumulation (activations_at)."""

    kept: float  # per token: what the blocks of one stage keep, and the output head's input
    head: float
    largest_block: float
    layer_bytes: float
    seq_len: int
    context_parallel: int
    output_head: bool
    tensor_parallel: int
    pipeline_parallel: int
    schedule: PipelineSchedule
    virtual_stages: int
    first_layers: int  # the first and last pipeline ranks' layers, and an even split's
    last_layers: int
    even_layers: float
    vision_per_sample: float | None  # LLaVA's tower and projector, per sample
    liger: bool
    loss_16bit: bool  # 16-bit weights without autocast and a loss that does not upcast
    compute_width: int
    hidden_size: int
    vocab_size: int
    recomputed_block: float  # per token: what backward rebuilds of one block (full: all of it; op: the rest)
    loss: LossKernel  # the cross-entropy's kernel (loss_kernels.py), where Liger's chunks do not replace it
    on_cpu: float  # per token: the checkpoints of one stage the stack keeps in CPU memory (stack_memory.py)
    checkpoints_in_flight: float  # per token: those the GPU holds meanwhile, one block's
    # LoRA on fused experts: one MoE block's expert stack rebuilt as W + BA each forward and kept for backward
    # (lora_targets.rebuilt_expert_bytes), and the MoE blocks of the most loaded stage; not per token
    rebuilt_experts: float = 0.0
    rebuilt_blocks: float = 0.0


def activation_terms(
    spec: ModelSpec, config: TrainingConfig, widths: Widths, stack: StackMemory = OURS
) -> ActivationTerms:
    layout = ActivationShape.of(config)._replace(te_blocks=stack.te_blocks, gelu_keeps_input=stack.gelu_keeps_input)
    kept, head, largest_block, layer_bytes = _per_token(spec, layout, widths)
    pp = config.pipeline_parallel
    on_cpu = in_flight = 0.0
    if moves_checkpoints_to_cpu(spec, config, stack):
        # DeepSpeed's cpu_checkpointing: the blocks' inputs go to CPU memory in the forward (checkpoints_to_cpu of
        # them a block), and each block's come back before its recomputation: the GPU holds the block in flight's.
        checkpoint = widths.residual * spec.hidden_size / (layout.tensor_parallel if layout.sequence_parallel else 1)
        kept -= checkpoint * spec.num_layers / pp  # the one a block kept on the GPU
        on_cpu = checkpoint * stack.checkpoints_to_cpu * spec.num_layers / pp
        in_flight = checkpoint * stack.checkpoints_to_cpu
    ranks, even = (config.rank_layers(spec), spec.num_layers / pp) if pp > 1 else ((1,), 1.0)
    moe_blocks = spec.num_layers - min(spec.dense_layers, spec.num_layers) if spec.is_moe else 0
    vision = vision_tower_bytes(spec, spec.vision_tower, layout, widths) if spec.vision_tower is not None else None
    return ActivationTerms(
        kept, head, largest_block, layer_bytes, config.seq_len, config.context_parallel,
        bool(spec.output_head), config.tensor_parallel,
        pp, config.pipeline_schedule, config.virtual_stages, ranks[0], ranks[-1], even, vision,
        # Liger's chunked loss runs in the model's forward; under context parallelism our engine takes the logits and
        # computes its own loss over them (backends/context_parallel/apply.py), so the logits are whole there.
        config.kernels is KernelChoice.LIGER and config.context_parallel == 1,
        widths.compute == 2 and not widths.autocast and arch_traits(spec).loss_in_logits_dtype,
        widths.compute, spec.hidden_size, spec.vocab_size,
        _recomputed_block(spec, config, layout, widths, largest_block), stack.loss_kernel(spec, config),
        on_cpu, in_flight, rebuilt_expert_bytes(spec, config), moe_blocks / pp,
    )  # fmt: skip


def _recomputed_block(
    spec: ModelSpec, config: TrainingConfig, layout: ActivationShape, widths: Widths, largest_block: float
) -> float:
    """Per token, the tensors backward rebuilds of one block at once: all of it under full checkpointing, all
    but what op-level checkpointing kept, nothing otherwise (selective's attention core is small beside it)."""
    if config.activation_checkpointing is ActivationCheckpointing.FULL:
        return largest_block
    if config.activation_checkpointing is ActivationCheckpointing.OP:
        held = last_output_bytes_per_token(spec, tensor_parallel=layout.tensor_parallel, width=widths.compute)
        return largest_block - op_kept_bytes(spec, layout, widths) + held
    return 0.0


def _loss_held(terms: ActivationTerms, logits: float) -> tuple[float, float, float]:
    """What one micro-batch's loss holds: at the forward's end, while its backward runs, and saved between the two
    (the kernel's bytes per logit: loss_kernels.py; Liger's chunks and the 16-bit loss as below)."""
    w = terms.compute_width
    if terms.liger and logits:
        # Liger's fused linear cross-entropy never holds the whole logits: it runs the head and the loss over
        # chunks of about hidden/vocab of the tokens (fp32 logits and their gradient, one chunk at a time) and
        # keeps the hidden states' gradient (16 bits) from forward to backward.
        chunk = 2 * 4 * (logits / terms.vocab_size) * terms.hidden_size
        held = w * (logits / terms.vocab_size) * terms.hidden_size
        return chunk + held, held, held
    if terms.loss_16bit and terms.loss is LossKernel.EAGER:
        # 16-bit weights without autocast and a loss that does not upcast: log-softmax in 16 bits, its
        # output and its gradient at backward start (trace whisper-small-fsdp4-b8-s448-bf16mixed).
        return 2 * 2 * logits, 2 * 2 * logits, 2 * logits
    per_logit = loss_bytes(terms.loss, w)
    return per_logit.forward_end * logits, per_logit.backward_start * logits, per_logit.saved * logits


def activations_at(terms: ActivationTerms, micro_batch: int, grad_accum: int) -> ActivationEstimate:
    kept, head = terms.kept, terms.head
    tokens = micro_batch * terms.seq_len // terms.context_parallel  # this rank's share
    in_flight = _in_flight(terms.pipeline_parallel, terms.schedule, terms.virtual_stages, grad_accum)
    logits = tokens * terms.vocab_size / terms.tensor_parallel if terms.output_head else 0.0
    loss_forward, loss_backward, loss_saved = _loss_held(terms, logits)
    activations = (kept + head) * tokens
    last_stage = False
    if terms.pipeline_parallel > 1:
        # The first stage holds the most micro-batches in flight; the last one holds the
        # output head's input and the loss. The larger of the two at backward start.
        # `kept` is for layers/pp of each stack: scale it to the first and last ranks' share of the map.
        first = kept * terms.first_layers / terms.even_layers * tokens * in_flight
        last_in_flight = grad_accum if terms.schedule is PipelineSchedule.GPIPE else 1
        # GPipe keeps what every micro-batch's loss saved (the eager loss: its fp32 log-softmax) until its backward.
        last = (kept * terms.last_layers / terms.even_layers + head) * tokens * last_in_flight + loss_saved * (
            last_in_flight - 1
        )
        last_stage = last + loss_backward > first
        activations = last if last_stage else first
        if not last_stage:
            loss_forward = loss_backward = 0.0
    if terms.vision_per_sample is not None:
        activations += terms.vision_per_sample * micro_batch
    activations += terms.checkpoints_in_flight * tokens  # once, whatever the micro-batches in flight
    recompute = terms.recomputed_block * tokens
    if terms.rebuilt_experts:  # rebuilt in each block's forward: kept by every block, or by the one recomputed
        if recompute:
            recompute += terms.rebuilt_experts
        else:
            activations += terms.rebuilt_experts * terms.rebuilt_blocks * in_flight
    on_cpu = (
        terms.on_cpu
        * tokens
        * in_flight
        * (terms.first_layers / terms.even_layers if terms.pipeline_parallel > 1 else 1)
    )
    # By position, in ActivationEstimate's field order: keywords cost a name match each, for every candidate.
    return ActivationEstimate(
        activations, loss_backward, loss_forward, recompute, terms.layer_bytes * tokens, in_flight, last_stage, on_cpu
    )
