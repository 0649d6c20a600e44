"""Training FLOPs of one sequence: model FLOPs (what MFU counts) and hardware FLOPs (HFU).

Conventions follow the published formulas (reference yaml):
- Megatron-LM / Korthikanti Eq. 7: model FLOPs per iteration
  72·B·L·s·h² (1 + s/(6h) + v/(12hL)) = 6·N_matmul·s + 12·L·s²·h per sequence,
  where N_matmul are the weights one token multiplies by (blocks plus the LM head;
  lookup tables do no arithmetic).
- The attention core is counted over the full s x s square (PaLM, Megatron, and
  llm-foundry's MFU all do), even for causal models; the time model, not this
  count, knows that flash attention skips the masked half.
- Full activation checkpointing repeats each block's forward but not the LM head
  (Megatron Eq. 3: 96·B·s·l·h² (1 + s/(6h) + V/(16lh)), i.e. 4 passes over the
  blocks, 3 over the head).
- Selective checkpointing repeats the attention core's forward, 4·s²·h_q per
  layer. Korthikanti Eq. 8 prints s/(3h) (three times that); we count the one
  forward the mechanism performs, which lies between Eq. 7 and Eq. 8.
- LoRA: the frozen weights need no weight-gradient matmul, so they cost 4·N·s
  (forward + input gradient); the adapters cost the usual 6·N_lora·s.
- Whisper: the encoder (its convolutions, its blocks, and the decoder's cross-attention
  key/value projections) runs over its fixed E audio positions, the rest over the s text
  tokens; the squares are E·E per encoder block, s·s and s·E per decoder block.
- LLaVA: the vision tower runs over its P patches and class token (P·P squares per tower
  block), the projector over the image's tokens, and the LLM over all s positions, the
  image's included.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.memory.arch_traits import arch_traits
from planner.memory.lora_targets import (
    adapter_params_per_block,
    head_adapter_params,
    lora_matrices,
    quantized_params_per_block,
    routed_adapter_params_per_block,
    vision_adapter_params,
)
from planner.memory.op_checkpointing import recomputed_matmul_share
from planner.models.spec import MlpKind, ModelFamily, ModelSpec
from planner.training_config import ActivationCheckpointing, AttentionKernel, TrainingConfig


@dataclass(frozen=True)
class ModelShape:
    """Per-spec quantities the FLOP and time models reuse; built once per spec."""

    hidden: int
    query_width: int  # heads x head_dim
    head_dim: int
    kv_width: int
    ffn: int  # dense FFN width, or one expert's
    vocab: int
    layers: int
    encoder_layers: int
    decoder_layers: int
    has_lm_head: bool
    causal: bool
    experts: int
    experts_per_token: int
    gated_mlp: bool
    norms_per_block: int
    head_params: int  # LM head matmul weights (0 without a head)
    block_matmul_params_per_token: float  # weights one token multiplies by inside the blocks
    block_linear_shapes: tuple[tuple[int, int], ...]  # (in, out) of one average block's linears
    # (in, out, how many a token multiplies by) of the matrices LoRA adapts in one average block, weighted by the
    # share of the blocks that hold them and, for routed experts' adapters, by top-k of the experts
    # (planner/memory/lora_targets.py); and the weights QLoRA stores in 4 bits, which each step dequantises.
    lora_shapes: tuple[tuple[int, int, float], ...]
    qlora_weights_per_block: float
    lora_rebuilds_experts: bool  # PEFT folds the expert adapters into the weights (lora_targets.py)
    # LoRA's trainable parameters at rank 1, the whole model's (its data-parallel gradient traffic): the routed
    # experts' apart, which expert parallelism splits
    adapters_at_rank_1: float
    routed_adapters_at_rank_1: float
    total_params: int
    trainable_params: int
    expert_params: int  # all experts of all blocks; expert parallelism splits these
    rmsnorm: bool = False  # RMSNorm, which transformers runs as a chain of eager ops
    rotary: bool = False  # rotary position embedding on q and k
    # Work per sequence that does not grow with its length (weight x position products, and the sum over
    # layers of positions^2 x query width): Whisper's encoder over its fixed audio positions (with the
    # decoder's cross-attention keys and values), LLaVA's vision tower and projector over the image.
    fixed_matmul_work: float = 0.0
    fixed_attention_work: float = 0.0
    encoder_seq_len: int = 0  # Whisper: the positions every decoder block's cross-attention reads
    # Width of the values (heads x v_head_dim): narrower than the queries' under latent attention (DeepSeek).
    value_width: int = 0
    attention_dropout: bool = False  # dropout on the attention probabilities in training (p > 0)
    softmax_fp32: bool = False  # eager attention's softmax in fp32 whatever the input (Llama's `dtype=torch.float32`)
    score_softcapping: bool = False  # eager attention soft-caps the scores with tanh first (Gemma-2)
    activation: str = ""  # the MLP's activation as the config names it (gelu_new, silu, ...): kernel_stack.py's key
    # Op-level checkpointing (--ac op): the share of the block's matmul work backward runs again (every second
    # matmul's; planner/memory/op_checkpointing.py).
    op_recomputed_matmul_share: float = 0.0
    fused_attention: bool = True  # the family can run SDPA's fused kernel (else its products and softmax are ops)


def model_shape(spec: ModelSpec) -> ModelShape:
    has_head = spec.family is not ModelFamily.ENCODER_ONLY or "Masked" in spec.transformers_class
    head_params = spec.vocab_size * spec.hidden_size if has_head else 0
    block_params = float(max(spec.params.active_per_token - spec.params.embedding, 0))
    fixed_matmul = fixed_attention = 0.0
    if spec.encoder_seq_len:
        per_position = _encoder_position_params(spec)
        block_params -= per_position
        fixed_matmul = per_position * spec.encoder_seq_len
        query_width = spec.num_heads * spec.head_dim
        fixed_attention = float(spec.num_encoder_layers * spec.encoder_seq_len**2 * query_width)
    tower = spec.vision_tower
    if tower is not None:
        positions = tower.max_position_embeddings
        tower_blocks = tower.params.total - tower.params.embedding
        block_params -= tower_blocks + spec.projector_params
        patches = tower.patch_values * tower.hidden_size * (positions - 1)
        fixed_matmul = tower_blocks * positions + patches + spec.projector_params * spec.image_tokens
        fixed_attention = float(tower.num_layers * positions * positions * tower.num_heads * tower.head_dim)
    ffn = spec.expert_ffn_size if spec.is_moe and spec.expert_ffn_size else spec.ffn_size
    is_enc_dec = spec.family is ModelFamily.ENCODER_DECODER
    # Of a block's experts, the share a token runs.
    routed_share = spec.experts_per_token / spec.num_experts if spec.is_moe else 1.0
    return ModelShape(
        hidden=spec.hidden_size,
        query_width=spec.num_heads * spec.head_dim,
        head_dim=spec.head_dim,
        kv_width=spec.kv_size,
        ffn=ffn,
        vocab=spec.vocab_size,
        layers=spec.num_layers,
        encoder_layers=spec.num_encoder_layers,
        decoder_layers=spec.num_decoder_layers,
        has_lm_head=has_head,
        causal=spec.family is ModelFamily.DECODER_ONLY,
        experts=spec.num_experts,
        experts_per_token=spec.experts_per_token,
        gated_mlp=spec.mlp_kind is MlpKind.GATED,
        norms_per_block=arch_traits(spec).norms_per_block,
        head_params=head_params,
        block_matmul_params_per_token=float(block_params),
        block_linear_shapes=_block_linear_shapes(spec, ffn),
        lora_shapes=tuple(
            (m.shape.fan_in, m.shape.fan_out, m.shape.count * m.share * (routed_share if m.routed else 1.0))
            for m in lora_matrices(spec, cross_attention=is_enc_dec)
            if m.adapted
        ),
        qlora_weights_per_block=quantized_params_per_block(spec, cross_attention=is_enc_dec),
        lora_rebuilds_experts=spec.is_moe and arch_traits(spec).peft_adapts_experts,
        adapters_at_rank_1=adapter_params_per_block(spec, 1, is_enc_dec) * spec.num_layers
        + vision_adapter_params(spec, 1)[0]
        + head_adapter_params(spec, 1),
        routed_adapters_at_rank_1=routed_adapter_params_per_block(spec, 1) * spec.num_layers,
        total_params=spec.params.total,
        trainable_params=spec.params.trainable,
        expert_params=spec.num_layers
        * spec.num_experts
        * spec.hidden_size
        * ffn
        * (3 if spec.mlp_kind is MlpKind.GATED else 2),
        rmsnorm=spec.norm == "rmsnorm",
        rotary=spec.position_embedding == "rotary",
        encoder_seq_len=spec.encoder_seq_len,
        fixed_matmul_work=fixed_matmul,
        fixed_attention_work=fixed_attention,
        value_width=spec.num_heads * spec.v_head_dim if spec.is_mla else spec.num_heads * spec.head_dim,
        attention_dropout=spec.attention_dropout > 0,
        softmax_fp32=arch_traits(spec).softmax_fp32,
        score_softcapping=arch_traits(spec).score_softcapping,
        activation=spec.activation,
        op_recomputed_matmul_share=recomputed_matmul_share(spec),
        fused_attention=arch_traits(spec).fused_attention,
    )


def _encoder_position_params(spec: ModelSpec) -> float:
    h, hq = spec.hidden_size, spec.num_heads * spec.head_dim
    encoder_block = 2 * h * hq + 2 * h * spec.kv_size + 2 * h * spec.ffn_size
    convolutions = 2 * 3 * spec.mel_bins * h + 3 * h * h  # the first over two frames per position
    return spec.num_encoder_layers * encoder_block + spec.num_decoder_layers * 2 * h * spec.kv_size + convolutions


def block_params_per_token(shape: ModelShape, seq_len: int) -> float:
    """Block weights one token multiplies by, the fixed work per sequence (Whisper's encoder, LLaVA's tower)
    spread over its s tokens."""
    return shape.block_matmul_params_per_token + shape.fixed_matmul_work / seq_len


def _block_linear_shapes(spec: ModelSpec, ffn: int) -> tuple[tuple[int, int], ...]:
    h, hq, kv = spec.hidden_size, spec.num_heads * spec.head_dim, spec.kv_size
    attention = ((h, hq + 2 * kv), (hq, h))
    mlp_in = 2 * ffn if spec.mlp_kind is MlpKind.GATED else ffn
    mlp = ((h, mlp_in), (ffn, h))
    return attention + mlp


def attention_square_layers(shape: ModelShape, seq_len: int | None = None) -> float:
    """Number of s x s attention products per sequence (cross-attention counts as one; Whisper's
    encoder squares and cross products in units of s x s)."""
    if shape.encoder_seq_len and seq_len:  # Whisper: decoder self-attention, and cross-attention over E keys
        squares = shape.decoder_layers * (1 + shape.encoder_seq_len / seq_len)
    elif shape.encoder_layers and shape.decoder_layers:
        squares = shape.encoder_layers + 2 * shape.decoder_layers  # decoder: self + cross
    else:
        squares = shape.layers
    if shape.fixed_attention_work and seq_len:
        squares += shape.fixed_attention_work / (seq_len * seq_len * shape.query_width)
    return squares


def lora_params_per_token(shape: ModelShape, rank: int) -> float:
    """Adapter weights one token multiplies by: rank x (in + out) per adapted linear."""
    per_block = sum(rank * (fan_in + fan_out) * count for fan_in, fan_out, count in shape.lora_shapes)
    return per_block * shape.layers


@dataclass(frozen=True)
class SequenceFlops:
    """FLOPs for one sequence through forward and backward."""

    model: float  # what MFU counts
    recompute: float  # extra forward work under activation checkpointing (HFU adds it)
    attention_forward: float  # the s x s products' forward share of `model`

    @property
    def hardware(self) -> float:
        return self.model + self.recompute


def sequence_flops(shape: ModelShape, config: TrainingConfig) -> SequenceFlops:
    s = config.seq_len
    block = block_params_per_token(shape, s)
    # QK^T over the query width and PV over the value width (equal except under latent attention).
    widths = shape.query_width + (shape.value_width or shape.query_width)
    attention_forward = 2.0 * s * s * widths * attention_square_layers(shape, s)
    if config.lora_rank:
        linear = 4.0 * (block + shape.head_params) * s + 6.0 * lora_params_per_token(shape, config.lora_rank) * s
    else:
        linear = 6.0 * (block + shape.head_params) * s
    model = linear + 3.0 * attention_forward
    if config.activation_checkpointing is ActivationCheckpointing.FULL:
        recompute = 2.0 * block * s + attention_forward
    elif config.activation_checkpointing is ActivationCheckpointing.SELECTIVE:
        recompute = attention_forward
    elif config.activation_checkpointing is ActivationCheckpointing.OP:
        # The skipped matmuls again; a fused attention kernel's output is kept, unfused products are not.
        recompute = 2.0 * shape.op_recomputed_matmul_share * block * s
        fused = config.attention is AttentionKernel.SDPA and shape.fused_attention
        recompute += 0.0 if fused else attention_forward
    else:
        recompute = 0.0
    return SequenceFlops(model=model, recompute=recompute, attention_forward=attention_forward)
