"""Activation memory kept for backward, and the loss temporaries over the vocabulary.

Generalises Korthikanti et al. (2022), "Reducing Activation Recomputation in
Large Transformer Models", Table 2 and Eq. 5-6, from a 2020 GPT block to the
real HF blocks: GQA, gated MLPs, RMSNorm's fp32 upcast, fused or separate
projections, MoE routing, and the two ways of running mixed precision
(autocast over fp32 weights, or weights cast to 16 bits). Every tensor is
counted in the width it is stored in, per token (bytes x b*s).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import NamedTuple

from planner.memory.arch_traits import ArchTraits, arch_traits
from planner.memory.op_checkpointing import kept_bytes_per_token
from planner.memory.runtime import Runtime
from planner.memory.spec_cache import per_spec_and_key
from planner.memory.te_blocks import TeLayout, counts_te_blocks, te_block
from planner.models.spec import MlpKind, ModelFamily, ModelSpec
from planner.training_config import (
    ActivationCheckpointing,
    AttentionKernel,
    Precision,
    Strategy,
    TrainingConfig,
)

KORTHIKANTI = "Korthikanti et al. 2022, Table 2, generalised to the HF block"


@dataclass(frozen=True)
class Widths:
    """Bytes per element of the stored tensors."""

    compute: int  # matmul inputs and outputs
    residual: int  # the residual stream between blocks
    autocast: bool  # fp32 weights under torch.autocast: each projection saves its own 16-bit input
    softmax_fp32: bool  # autocast runs softmax in fp32 (CUDA)
    dropout_mask: int  # bytes per element a dropout keeps besides its output
    experts: int  # width of the expert matmuls' outputs (MoE)


def activation_widths(config: TrainingConfig, native_mixed: bool, runtime: Runtime = Runtime.CUDA) -> Widths:
    return _widths(config.precision, native_mixed and config.strategy is Strategy.DDP, runtime)


@cache
def _widths(precision: Precision, autocast_ddp: bool, runtime: Runtime) -> Widths:
    if precision is Precision.FP32:
        return Widths(4, 4, False, False, runtime.dropout_mask_bytes(4), 4)
    if precision.is_mixed and autocast_ddp:
        # DDP trains fp32 weights under torch.autocast: the residual stream stays fp32.
        experts = 2 if runtime.autocast_covers_experts else 4
        return Widths(2, 4, True, runtime.autocast_softmax_fp32, runtime.dropout_mask_bytes(2), experts)
    return Widths(2, 2, False, False, runtime.dropout_mask_bytes(2), 2)


def _norm_bytes(traits: ArchTraits, widths: Widths, consumers: int) -> int:
    """Bytes per hidden element one norm keeps: its input, its output, what consumers cast."""
    w = widths.compute
    output = w if consumers else 0  # a post-norm's output only feeds the residual add
    if traits.rmsnorm_upcasts:
        if widths.autocast:
            return 8 + 2 * consumers  # fp32 input and normalised value; a 16-bit cast per consumer
        normalised = 4 if traits.norm_fp32_weighting else w
        return 4 + normalised + output  # fp32 upcast input, normalised value, weighted output
    if widths.autocast:
        return 4 + 2 * consumers  # layer_norm runs in fp32 under autocast; a 16-bit cast per consumer
    return widths.residual + output


def _score_bytes(traits: ArchTraits, widths: Widths, dropout: bool) -> int:
    """Bytes per element of the s x s attention probabilities an unfused kernel keeps."""
    w = widths.compute
    # Under autocast the scores are fp32 once a float (fp32) causal mask is added.
    promoted = widths.autocast and (widths.softmax_fp32 or traits.causal_float_mask)
    softmax = 4 if w == 4 or traits.softmax_fp32 or promoted else w
    capped = w if traits.score_softcapping else 0  # tanh's output, kept for its backward
    if dropout:
        return capped + softmax + widths.dropout_mask + w  # softmax output, dropout mask, dropout output
    return capped + softmax + (w if softmax != w else 0)  # softmax output and its 16-bit cast


class ActivationShape(NamedTuple):
    """The parts of a TrainingConfig that activations per token depend on (hashable, cheap)."""

    tensor_parallel: int
    sequence_parallel: bool
    pipeline_parallel: int
    attention: AttentionKernel
    checkpointing: ActivationCheckpointing
    seq_len: int
    # Context parallelism: each rank holds seq_len / cp of every sequence and gathers all of its keys and values.
    context_parallel: int = 1
    fp8: bool = False  # FP8 block matmuls: each keeps an FP8 copy of its input for backward
    routed_load: float = 1.0  # MoE: the busiest expert-parallel rank's routed assignments, in even shares
    # MoE under tp in our engine: every tp rank routes all the tokens, so each holds every routed token's hidden
    # state (gathered for its experts, weighted after them); only the experts' ffn-wide tensors split over tp.
    routes_every_token_per_tp_rank: bool = False
    te_blocks: bool = False  # the stack's blocks are Megatron-Core's with Transformer Engine (te_blocks.py)
    gelu_keeps_input: bool = False  # the stack's GELU keeps its input alone (stack_memory.py)

    @classmethod
    def of(cls, config: TrainingConfig) -> ActivationShape:
        return cls(
            config.tensor_parallel,
            config.sequence_parallel,
            config.pipeline_parallel,
            config.attention,
            config.activation_checkpointing,
            config.seq_len,
            config.context_parallel,
            config.fp8,
            config.routing.busiest_rank_load(config.expert_parallel),
            config.strategy is Strategy.ENGINE,
        )


def _attention_bytes(
    spec: ModelSpec,
    layout: ActivationShape,
    widths: Widths,
    *,
    kv_seq_len: int,
    kv_per_token: float = 1.0,
    causal: bool = False,
) -> float:
    """Bytes one attention keeps per query token. Keys and values come from kv_per_token positions per
    query token: 1 for self-attention, the encoder's positions per decoder token for Whisper's cross-attention.
    causal: a decoder's self-attention in an encoder-decoder, which adds a float causal mask too."""
    traits = arch_traits(spec)
    if causal:
        traits = replace(traits, causal_float_mask=True)
    w = widths.compute
    q_width, kv_width = spec.num_heads * spec.head_dim, spec.kv_size * kv_per_token
    fused = layout.attention is AttentionKernel.SDPA and traits.fused_attention
    selective = layout.checkpointing is ActivationCheckpointing.SELECTIVE
    if selective:
        # The recomputed core keeps only its inputs: q, and k and v before repeat_kv. Under
        # autocast, rotary embeddings (fp32 cos/sin) promote q and k to fp32.
        rotary_width = 4 if widths.autocast and spec.position_embedding == "rotary" else w
        attention = (q_width + kv_width) * rotary_width + (q_width + kv_width) * w
    elif spec.is_mla:
        # Latent attention: q and k of head_dim, v and the output projection's input of v_head_dim, and the
        # latents: kv_a's output and its RMSNorm (fp32 input, normalised value), q_a's too with a q bottleneck.
        v_width = spec.num_heads * spec.v_head_dim
        attention = (q_width + q_width * kv_per_token + v_width * kv_per_token + v_width) * w
        attention += (spec.kv_lora_rank + spec.qk_rope_head_dim) * w + spec.kv_lora_rank * (4 + w)
        attention += spec.q_lora_rank * w + spec.q_lora_rank * (4 + w)
    else:
        # q, k and v (k and v repeated to all query heads: repeat_kv), the output projection's input. The
        # engine's cp attention keeps the gathered k and v at their own heads (SDPA's enable_gqa, no repeat).
        keys_values = 2 * (kv_width if layout.context_parallel > 1 else q_width * kv_per_token)
        attention = (2 * q_width + keys_values) * w
    if traits.qkv_slices_pinned:
        attention += (q_width + kv_width) * w
    if traits.qk_norm:
        attention += (q_width + kv_width) * (4 + w)  # fp32 upcast input and normalised value
    if spec.qk_l2_norm:
        attention += (q_width + kv_width) * 4  # Llama 4: the fp32 input and scale, no weight to apply
    if layout.context_parallel > 1 and not selective:
        # The engine's cp attention runs a kernel per zig-zag chunk and concatenates their outputs: the output
        # projection's input is a copy beside the kernels' outputs (traces llama3-1b-cp*).
        attention += q_width * w
    if fused:
        if not selective:
            attention += q_width * w + spec.num_heads * 4  # kernel output and logsumexp
    elif not selective:
        dropout = spec.attention_dropout > 0
        attention += spec.num_heads * kv_seq_len * _score_bytes(traits, widths, dropout)
    return attention


def block_bytes(
    spec: ModelSpec,
    layout: ActivationShape,
    widths: Widths,
    *,
    kv_seq_len: int,
    cross_attention: bool = False,
    encoder_per_token: float = 1.0,
) -> float:
    """Bytes one block keeps per token of one micro-batch, on one tensor-parallel rank.

    Tensors of hidden width are split by tensor parallelism only under sequence
    parallelism; tensors of head or FFN width always are. A decoder block's
    cross-attention reads encoder_per_token encoder positions per token (1 for T5).
    """
    traits = arch_traits(spec)
    tp = layout.tensor_parallel
    hidden_split = tp if layout.sequence_parallel else 1
    w = widths.compute
    h = spec.hidden_size
    if layout.te_blocks and not cross_attention:
        te_layout = TeLayout(tp, layout.sequence_parallel, layout.fp8, w)
        cp = layout.context_parallel
        if counts_te_blocks(spec, te_layout, layout.checkpointing, cp=cp, autocast=widths.autocast):
            return te_block(spec, te_layout, layout.routed_load)

    consumers = (traits.qkv_projections, traits.mlp_input_projections) + (0,) * max(traits.norms_per_block - 2, 0)
    hidden = sum(_norm_bytes(traits, widths, c) for c in consumers[: traits.norms_per_block]) * h
    hidden += traits.hidden_dropouts_per_block * widths.dropout_mask * h

    # Under context parallelism the gathered keys and values of the whole sequence are kept: cp per local token.
    attention = _attention_bytes(
        spec, layout, widths, kv_seq_len=kv_seq_len, kv_per_token=layout.context_parallel, causal=cross_attention
    )
    if cross_attention:
        hidden += (_norm_bytes(traits, widths, 1) + (widths.dropout_mask if spec.hidden_dropout > 0 else 0)) * h
        encoder_len = spec.encoder_seq_len or kv_seq_len
        attention += _attention_bytes(
            spec, layout, widths, kv_seq_len=encoder_len, kv_per_token=encoder_per_token
        )  # fmt: skip
        if widths.autocast:
            attention += 2 * 2 * h * encoder_per_token  # k and v projections each cast the (fp32) encoder output

    mlp, whole_per_tp_rank = _mlp_bytes(spec, layout, widths, traits)
    if layout.fp8 and w == 2:
        # Transformer Engine keeps each block matmul's input for backward as an FP8 copy (1 byte) instead of a
        # 16-bit one: the norms' outputs feeding attention and the MLP (one copy per projection under
        # autocast), the attention output feeding o_proj (the MLP's down_proj: _mlp_bytes).
        per_norm = (traits.qkv_projections + traits.mlp_input_projections) if widths.autocast else 2
        hidden -= per_norm * h
        attention -= spec.num_heads * spec.head_dim
    return hidden / hidden_split + (attention + mlp) / tp + whole_per_tp_rank


def _mlp_bytes(spec: ModelSpec, layout: ActivationShape, widths: Widths, traits: ArchTraits) -> tuple[float, float]:
    """(bytes per token the MLP keeps, split by tensor parallelism; bytes each tp rank keeps whole): the MoE
    routing and experts, or the dense MLP."""
    w, h = widths.compute, spec.hidden_size
    ffn = spec.expert_ffn_size if spec.is_moe and spec.expert_ffn_size else spec.ffn_size
    gated = spec.mlp_kind is MlpKind.GATED
    # Transformers' tanh GELU chains keep intermediates that a stack's native or fused GELU does not.
    input_only = layout.gelu_keeps_input and not gated and spec.activation in ("gelu_new", "gelu_fast")
    mlp_tensors = (3 if gated else 1) + (1 if input_only else traits.activation_saved_tensors)
    whole_per_tp_rank = 0.0
    mlp_width = widths.experts if spec.is_moe else w
    mlp: float = ffn * mlp_width * mlp_tensors
    if traits.mlp_dropout:
        mlp += ffn * (widths.dropout_mask + w)  # mask and output of the dropout before the down projection
    if spec.is_moe:
        k = spec.experts_per_token * layout.routed_load  # an uneven router: the busiest rank's share
        # Each token's hidden state is gathered for, and weighted after, each of its k experts.
        routed_hidden = k * h * (w + widths.experts)
        if layout.routes_every_token_per_tp_rank:  # whole on every tp rank: not divided by tp below
            whole_per_tp_rank, routed_hidden = routed_hidden, 0.0
        mlp = k * mlp + routed_hidden + spec.num_experts * 4
        if traits.shared_expert:  # an always-on gated MLP (older Qwen2-MoE specs: of ffn_size), maybe gated
            shared = spec.shared_expert_ffn_size or spec.ffn_size
            mlp += shared * w * (3 + traits.activation_saved_tensors) + (4 if traits.shared_expert_gate else 0)
        if spec.dense_layers:  # blocks with a dense MLP of ffn_size instead: the average block over the model
            dense, dense_share = (
                spec.ffn_size * w * mlp_tensors,
                min(spec.dense_layers, spec.num_layers) / spec.num_layers,
            )
            mlp += (dense - mlp) * dense_share
            whole_per_tp_rank *= 1 - dense_share
    if layout.fp8 and w == 2:  # the MLP product feeding down_proj kept as an FP8 copy (block_bytes)
        mlp -= ffn * (spec.experts_per_token * layout.routed_load if spec.is_moe else 1)
    return mlp, whole_per_tp_rank


def _audio_frontend_bytes(spec: ModelSpec, widths: Widths) -> float:
    """Per encoder position: Whisper's two convolutions over 2 frames per position keep the first conv's
    output and its GELU (both at 2 frames), the second conv's output (its GELU's input) and, under
    autocast, the mel frames cast to 16 bits."""
    frames = 2
    kept = (2 * frames + 1) * spec.hidden_size * widths.compute
    return kept + (frames * spec.mel_bins * 2 if widths.autocast else 0)


def _head_bytes(spec: ModelSpec, layout: ActivationShape, widths: Widths) -> float:
    """Per token: the final norm (or BERT's MLM transform) feeding the output head; nothing without a head."""
    traits = arch_traits(spec)
    h = spec.hidden_size
    if not spec.output_head:
        return 0.0  # a bare encoder's output is its last block's, already counted; pooling keeps nothing
    if spec.family is ModelFamily.ENCODER_ONLY:
        # dense -> GELU -> LayerNorm -> decoder: dense output, GELU output, LN output.
        return 3 * h * widths.compute + (2 * h if widths.autocast else 0)
    return _norm_bytes(traits, widths, 1) * h / (layout.tensor_parallel if layout.sequence_parallel else 1)


@per_spec_and_key
def _per_token(spec: ModelSpec, layout: ActivationShape, widths: Widths) -> tuple[float, float, float, float]:
    """Per token of one micro-batch: (bytes the blocks of one stage keep, bytes the output
    head's input keeps, largest block, average block).

    Whisper's encoder runs over its own encoder_seq_len positions whatever the text's length:
    its stack counts encoder positions per decoder token (r) times its bytes per position."""
    s, tp, pp = layout.seq_len, layout.tensor_parallel, layout.pipeline_parallel
    h = spec.hidden_size
    r = spec.encoder_seq_len / s if spec.encoder_seq_len else 1.0
    if spec.family is ModelFamily.ENCODER_DECODER:
        enc = block_bytes(spec, layout, widths, kv_seq_len=spec.encoder_seq_len or s) * r
        dec = block_bytes(spec, layout, widths, kv_seq_len=s, cross_attention=True, encoder_per_token=r)
        stacks = [(enc, spec.num_encoder_layers), (dec, spec.num_decoder_layers)]
        layer_bytes = (enc * spec.num_encoder_layers + dec * spec.num_decoder_layers) / spec.num_layers
        largest_block = max(enc, dec)
        positions = [r, 1.0]  # per decoder token: the encoder's positions, the decoder's own
    else:
        layer_bytes = largest_block = block_bytes(spec, layout, widths, kv_seq_len=s)
        stacks = [(layer_bytes, spec.num_layers)]
        positions = [1.0]

    block_input = widths.residual * h / (tp if layout.sequence_parallel else 1)
    if layout.checkpointing is ActivationCheckpointing.OP:  # the input and every second matmul's output
        block_input += op_kept_bytes(spec, layout, widths)
    recomputed = layout.checkpointing in (ActivationCheckpointing.FULL, ActivationCheckpointing.OP)
    layers_share = 1 / pp  # the first stage holds layers/pp of every stack
    kept = sum(
        (block_input * ratio if recomputed else per_layer) * count
        for (per_layer, count), ratio in zip(stacks, positions, strict=True)
    ) * layers_share  # fmt: skip
    stack_positions = sum(positions)  # encoder and decoder each end in a final norm
    if spec.hidden_dropout > 0:
        # Dropout after the embeddings (split by sequence parallelism like the blocks' input).
        kept += widths.dropout_mask * h * stack_positions / (tp if layout.sequence_parallel else 1)
    if spec.mel_bins:
        kept += _audio_frontend_bytes(spec, widths) * r
    return kept, _head_bytes(spec, layout, widths) * stack_positions, largest_block, layer_bytes


def op_kept_bytes(spec: ModelSpec, layout: ActivationShape, widths: Widths) -> float:
    """Per token, what op-level checkpointing keeps of one block beside its input (op_checkpointing.py)."""
    fused = layout.attention is AttentionKernel.SDPA and arch_traits(spec).fused_attention
    return kept_bytes_per_token(
        spec, tensor_parallel=layout.tensor_parallel, width=widths.compute, fused_attention=fused
    )


def vision_tower_bytes(spec: ModelSpec, tower: ModelSpec, layout: ActivationShape, widths: Widths) -> float:
    """Per image (LLaVA): what the CLIP tower keeps over its patches and class token, and the projector over
    the image's tokens: its input, its first linear's output and the GELU output the second linear saves."""
    positions = tower.max_position_embeddings
    tower_layout = layout._replace(
        tensor_parallel=1, sequence_parallel=False, pipeline_parallel=1, seq_len=positions, context_parallel=1
    )
    kept, head, _, _ = _per_token(tower, tower_layout, widths)
    projector = tower.hidden_size * widths.compute + 2 * spec.hidden_size * widths.compute
    return (kept + head) * positions + projector * spec.image_tokens
