"""Activation memory kept for backward, and the loss temporaries over the vocabulary.

Generalises Korthikanti et al. (2022), "Reducing Activation Recomputation in
Large Transformer Models", Table 2 and Eq. 5-6, from a 2020 GPT block to the
real HF blocks: GQA, gated MLPs, RMSNorm's fp32 upcast, fused or separate
projections, MoE routing, and the two ways of running mixed precision
(autocast over fp32 weights, or weights cast to 16 bits). Every tensor is
counted in the width it is stored in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model_spec import ModelFamily, ModelSpec
from ..training_config import ActivationCheckpointing, AttentionKernel, PipelineSchedule, Precision, TrainingConfig
from .arch_traits import ArchTraits, arch_traits

KORTHIKANTI = "Korthikanti et al. 2022, Table 2, generalised to the HF block"


@dataclass(frozen=True)
class Widths:
    """Bytes per element of the stored tensors."""

    compute: int  # matmul inputs and outputs
    residual: int  # the residual stream between blocks
    autocast: bool  # each projection saves its own 16-bit cast of its input


def activation_widths(config: TrainingConfig, native_mixed: bool) -> Widths:
    if config.precision is Precision.FP32:
        return Widths(4, 4, False)
    if config.precision.is_mixed and native_mixed and config.strategy.value == "ddp":
        # DDP trains fp32 weights under torch.autocast: the residual stream stays fp32.
        return Widths(2, 4, True)
    return Widths(2, 2, False)


@dataclass
class ActivationEstimate:
    activations: float  # saved for backward on the most loaded rank, all micro-batches in flight
    temporaries: float  # logits and loss over the vocabulary, and one block recomputed under checkpointing
    per_layer: float  # one block, one micro-batch, as stored
    micro_batches_in_flight: float
    notes: list[str] = field(default_factory=list)


def _norm_bytes(traits: ArchTraits, widths: Widths, consumers: int, tokens_h: float) -> float:
    """One norm: its saved input, its normalised output, and what its consumers keep."""
    if widths.autocast:
        # Norms run in fp32 under autocast; each consuming projection saves a 16-bit copy.
        kept = 4 + (4 if traits.rmsnorm_upcasts else 0) + 2 * consumers
    elif traits.rmsnorm_upcasts:
        # fp32 upcast of the input, the 16-bit normalised value, and the weighted output.
        kept = 4 + widths.compute + widths.compute
    else:
        kept = widths.residual + widths.compute  # LayerNorm keeps its input; projections its output
    return kept * tokens_h


def block_bytes(
    spec: ModelSpec,
    config: TrainingConfig,
    widths: Widths,
    *,
    seq_len: int,
    kv_seq_len: int | None = None,
    cross_attention: bool = False,
) -> tuple[float, float]:
    """(bytes kept, bytes on the s x s attention path) for one block and one micro-batch.

    Tensors of hidden width are split by tensor parallelism only under sequence
    parallelism; tensors of head or FFN width always are.
    """
    traits = arch_traits(spec)
    tp = config.tensor_parallel
    hidden_split = tp if config.sequence_parallel else 1
    b, s = config.micro_batch, seq_len
    kv_s = kv_seq_len or s
    tokens = b * s
    w = widths.compute
    q_width = spec.num_heads * spec.head_dim
    kv_width = spec.kv_size
    ffn = spec.expert_ffn_size if spec.is_moe and spec.expert_ffn_size else spec.ffn_size

    hidden_part = 0.0
    attention_consumers = traits.qkv_projections
    mlp_consumers = traits.mlp_input_projections
    for index in range(traits.norms_per_block):
        consumers = attention_consumers if index == 0 else mlp_consumers if index == 1 else 0
        hidden_part += _norm_bytes(traits, widths, consumers, tokens * spec.hidden_size)
    if spec.hidden_dropout > 0:
        hidden_part += 2 * tokens * spec.hidden_size  # one bool mask after attention, one after the MLP

    fused = config.attention is AttentionKernel.SDPA and traits.fused_attention
    selective = config.activation_checkpointing is ActivationCheckpointing.SELECTIVE
    attention_blocks = 2 if cross_attention else 1
    split_part = 0.0
    score_part = 0.0
    for _ in range(attention_blocks):
        split_part += tokens * (q_width + 2 * kv_width) * w  # q, k, v as the kernel keeps them
        split_part += tokens * q_width * w  # output projection's input
        if fused:
            if not selective:
                split_part += tokens * q_width * w + b * spec.num_heads * s * 4  # kernel output, logsumexp
        elif not selective:
            # Softmax in fp32, its 16-bit cast for the value matmul, and dropout's mask and output.
            per_score = 4 + (w if w != 4 else 0) + ((1 + w) if spec.attention_dropout > 0 else 0)
            score_part += b * spec.num_heads * s * kv_s * per_score
            split_part += tokens * q_width * w  # the matmul's output before the transpose copy

    act_tensors = traits.activation_saved_tensors
    if spec.mlp_kind.value == "gated":
        mlp_tensors = 3 + act_tensors  # gate output(s) kept by the activation, up output, product
    else:
        mlp_tensors = 1 + act_tensors  # the activation's saved tensors, and the down projection's input
    mlp = tokens * ffn * w * mlp_tensors
    if spec.is_moe:
        k = spec.experts_per_token
        # Each token's hidden state is gathered for, and weighted after, each of its k experts.
        mlp = k * mlp + 2 * k * tokens * spec.hidden_size * w + tokens * spec.num_experts * 4
    split_part += mlp
    return hidden_part / hidden_split + (split_part + score_part) / tp, score_part / tp


def _in_flight(config: TrainingConfig) -> float:
    """Micro-batches whose activations the first pipeline stage holds at once."""
    pp, m = config.pipeline_parallel, config.grad_accum
    if pp == 1:
        return 1.0
    if config.pipeline_schedule is PipelineSchedule.GPIPE:
        return float(m)
    in_flight = float(min(pp, m))
    if config.pipeline_schedule is PipelineSchedule.INTERLEAVED:
        in_flight *= 1 + (pp - 1) / (pp * config.virtual_stages)  # Korthikanti Eq. 5 multiplier
    return in_flight


def loss_temporaries(spec: ModelSpec, config: TrainingConfig, widths: Widths) -> float:
    """Logits and the cross-entropy over the vocabulary at the start of backward.

    HF upcasts logits to fp32 for the loss: the 16-bit logits, log-softmax's fp32
    output, and backward's fp32 gradient in and out are alive together.
    """
    tokens = config.micro_batch * config.seq_len
    logits_width = widths.compute
    per_value = logits_width + 4 + 4 + 4
    return tokens * spec.vocab_size * per_value / config.tensor_parallel


def estimate_activations(spec: ModelSpec, config: TrainingConfig, widths: Widths) -> ActivationEstimate:
    notes = [KORTHIKANTI]
    s = config.seq_len
    pp = config.pipeline_parallel
    if spec.family is ModelFamily.ENCODER_DECODER:
        enc_block, _ = block_bytes(spec, config, widths, seq_len=s)
        dec_block, _ = block_bytes(spec, config, widths, seq_len=s, cross_attention=True)
        layer_bytes = (enc_block * spec.num_encoder_layers + dec_block * spec.num_decoder_layers) / spec.num_layers
    else:
        layer_bytes, _ = block_bytes(spec, config, widths, seq_len=s)

    layers_on_rank = spec.num_layers // pp
    tokens_h = config.micro_batch * s * spec.hidden_size
    block_input = tokens_h * widths.residual / (config.tensor_parallel if config.sequence_parallel else 1)
    recompute = 0.0
    if config.activation_checkpointing is ActivationCheckpointing.FULL:
        kept_per_layer = block_input  # the checkpoint keeps each block's input only
        recompute = layer_bytes  # backward rebuilds one block's activations at a time
        notes.append("full checkpointing: block inputs kept, one block recomputed at a time")
    else:
        kept_per_layer = layer_bytes
    embedding_output = tokens_h * widths.compute  # also the first norm's input under most layouts
    in_flight = _in_flight(config)
    activations = (kept_per_layer * layers_on_rank + embedding_output) * in_flight
    temporaries = recompute
    if pp == 1:
        # Pipelines put the loss on the last stage, not on the first (most loaded) one.
        temporaries += loss_temporaries(spec, config, widths)
    if not (config.attention is AttentionKernel.SDPA and arch_traits(spec).fused_attention):
        notes.append("attention keeps the s x s probabilities (no fused kernel)")
    return ActivationEstimate(
        activations=activations,
        temporaries=temporaries,
        per_layer=layer_bytes,
        micro_batches_in_flight=in_flight,
        notes=notes,
    )
