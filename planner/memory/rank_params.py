"""How many parameters the most loaded rank holds, before data-parallel sharding.

Tensor parallelism splits each block's matrices and the vocabulary; pipeline
parallelism gives each stage layers/pp blocks, the first stage the embedding
and the last the output head (a second copy when tied and pp > 1); expert
parallelism splits the experts. LoRA freezes the base and trains r*(in+out)
per adapted matrix (adapted_linears: every linear layer in the blocks, the
QLoRA paper's choice, as PEFT's target_modules="all-linear" finds them).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.memory.arch_traits import arch_traits
from planner.memory.spec_cache import per_spec_and_key
from planner.models.spec import MlpKind, ModelFamily, ModelSpec
from planner.training_config import TrainingConfig

# NF4 stores 4 bits per weight plus double-quantised block constants:
# 0.127 bits per parameter (QLoRA paper, Sec. 3), i.e. 4.127 bits in all.
QLORA_BYTES_PER_PARAM = 4.127 / 8


@dataclass(frozen=True)
class LinearShape:
    fan_in: int
    fan_out: int
    count: int = 1  # how many such matrices per block (experts, gate+up)

    @property
    def params(self) -> int:
        return self.fan_in * self.fan_out * self.count


def attention_shapes(spec: ModelSpec) -> list[LinearShape]:
    """One attention's weight matrices: q, k and v, and the output; latent attention (DeepSeek's MLA) as
    param_formula.py counts it: q through its q_lora_rank bottleneck (or one projection), the kv_lora_rank latent and
    the shared rotary key, their expansion to every head's key and value, the output."""
    h, heads, q_width = spec.hidden_size, spec.num_heads, spec.num_heads * spec.head_dim
    if not spec.is_mla:
        return [LinearShape(h, q_width), LinearShape(h, spec.kv_size, 2), LinearShape(q_width, h)]
    bottleneck = spec.q_lora_rank
    query = [LinearShape(h, bottleneck), LinearShape(bottleneck, q_width)] if bottleneck else [LinearShape(h, q_width)]
    nope = spec.head_dim - spec.qk_rope_head_dim
    latent = LinearShape(h, spec.kv_lora_rank + spec.qk_rope_head_dim)
    expand = LinearShape(spec.kv_lora_rank, heads * (nope + spec.v_head_dim))
    return [*query, latent, expand, LinearShape(heads * spec.v_head_dim, h)]


def block_linear_shapes(spec: ModelSpec, cross_attention: bool = False) -> list[LinearShape]:
    """The weight matrices of one transformer block: attention_shapes (twice with cross-attention), then a shared
    expert's two if any, then the MLP's or experts' two."""
    h = spec.hidden_size
    attention = attention_shapes(spec) * (2 if cross_attention else 1)
    experts = max(spec.num_experts, 1)
    ffn = spec.expert_ffn_size if spec.is_moe and spec.expert_ffn_size else spec.ffn_size
    up_matrices = 2 if spec.mlp_kind is MlpKind.GATED else 1
    mlp = [LinearShape(h, ffn, up_matrices * experts), LinearShape(ffn, h, experts)]
    if spec.shared_expert_ffn_size:  # the always-on shared expert (Qwen2-MoE, DeepSeek): a gated MLP
        shared = spec.shared_expert_ffn_size
        mlp = [LinearShape(h, shared, 2), LinearShape(shared, h)] + mlp
    return attention + mlp


@dataclass(frozen=True)
class AdaptedLinear:
    """A matrix LoRA adapts, in the share of the blocks that hold it (an MoE model's dense blocks' MLP)."""

    shape: LinearShape
    share: float = 1.0
    # QLoRA stores it in 4 bits: bitsandbytes replaces the modules whose type is exactly nn.Linear
    # (transformers' integrations/bitsandbytes.py, replace_with_bnb_linear), not a subclass such as Llama 4's router.
    quantized: bool = True


def adapted_linears(spec: ModelSpec, cross_attention: bool = False) -> list[AdaptedLinear]:
    """The matrices LoRA adapts in one average block: every nn.Linear in the blocks, which is what PEFT's
    target_modules="all-linear" takes (all linear modules but the output head). transformers 5 holds an MoE
    block's routed experts as fused 3-D tensors (experts.gate_up_proj, experts.down_proj), so they take no
    adapter; the attention, a shared expert (and Qwen2-MoE's gate on it), the MLP of an MoE model's dense blocks
    and a router that is a linear module (Llama 4's; most are a plain weight) do (tests/test_lora_targets.py counts
    them against transformers' own modules)."""
    if not spec.is_moe:
        return [AdaptedLinear(shape) for shape in block_linear_shapes(spec, cross_attention)]
    adapted = [AdaptedLinear(shape) for shape in attention_shapes(spec) * (2 if cross_attention else 1)]
    dense_share = min(spec.dense_layers, spec.num_layers) / spec.num_layers
    h, ffn, shared = spec.hidden_size, spec.ffn_size, spec.shared_expert_ffn_size
    if dense_share:
        up_matrices = 2 if spec.mlp_kind is MlpKind.GATED else 1
        dense_mlp = (LinearShape(h, ffn, up_matrices), LinearShape(ffn, h))
        adapted += [AdaptedLinear(shape, dense_share) for shape in dense_mlp]
    traits = arch_traits(spec)
    moe_share = 1 - dense_share
    if traits.linear_router:
        adapted.append(AdaptedLinear(LinearShape(h, spec.num_experts), moe_share, quantized=False))
    if shared:  # the always-on shared expert (a gated MLP), in the MoE blocks only
        shared_mlp = [LinearShape(h, shared, 2), LinearShape(shared, h)]
        shared_mlp += [LinearShape(h, 1)] if traits.shared_expert_gate else []
        adapted += [AdaptedLinear(shape, moe_share) for shape in shared_mlp]
    return adapted


def adapter_params_per_block(spec: ModelSpec, rank: int, cross_attention: bool = False) -> float:
    """LoRA's trainable parameters in one average block: r x (in + out) per adapted matrix."""
    adapted = adapted_linears(spec, cross_attention)
    return sum(rank * (a.shape.fan_in + a.shape.fan_out) * a.shape.count * a.share for a in adapted)


@dataclass(frozen=True)
class RankParams:
    """Parameters on the most loaded rank (first pipeline stage, one TP shard)."""

    total: int  # everything this rank stores
    trainable: int  # what gets gradients and optimizer states
    quantized: int  # frozen weights stored in 4 bits (QLoRA), part of total
    block: int  # one transformer block on this rank (all experts it holds)
    blocks_on_rank: int
    embedding: int  # embedding (and head) parameters on this rank
    # Largest module owning parameters directly (ZeRO-3 gathers module by module).
    largest_module: int
    experts: int = 0  # the routed experts' parameters among total (MoE)


def _average_block_params(spec: ModelSpec) -> float:
    # Blocks hold everything but the embeddings (and the small final norms);
    # dividing keeps counts exact on average without re-deriving each layer.
    return (spec.params.total - spec.params.embedding) / spec.num_layers


def rank_params(spec: ModelSpec, config: TrainingConfig) -> RankParams:
    stages = config.rank_layers(spec) if config.pipeline_parallel > 1 else None
    return _rank_params(
        spec, config.tensor_parallel, config.pipeline_parallel, config.expert_parallel, config.lora_rank, config.qlora,
        stages,
    )  # fmt: skip


@per_spec_and_key
def _rank_params(
    spec: ModelSpec, tp: int, pp: int, ep: int, lora_rank: int, qlora: bool, stages: tuple[int, ...] | None = None
) -> RankParams:
    block_full = _average_block_params(spec)
    experts_per_block = 0.0  # on this rank, before tensor parallelism
    if spec.is_moe:
        routed_share = 1 - min(spec.dense_layers, spec.num_layers) / spec.num_layers  # dense blocks hold none
        experts_per_block = sum(s.params for s in block_linear_shapes(spec)[-2:]) * routed_share / ep
        block_full -= experts_per_block * (ep - 1)
    block = int(block_full / tp)
    embedding = spec.params.embedding
    if pp > 1:
        # The first stage holds the input embedding and the last the head (a
        # copy when tied), so no single stage holds more than one of them.
        embedding = spec.vocab_size * spec.hidden_size
    embedding_on_rank = int(embedding / tp)
    if pp > 1 and stages is not None:
        # The heaviest rank: its blocks, plus the embedding on the first and the head on the last.
        loads = [count * block + (embedding_on_rank if rank in (0, pp - 1) else 0) for rank, count in enumerate(stages)]
        heaviest = max(range(pp), key=lambda rank: loads[rank])
        blocks_on_rank = stages[heaviest]
        embedding_on_rank = embedding_on_rank if heaviest in (0, pp - 1) else 0
    else:
        blocks_on_rank = spec.num_layers // pp
    total = block * blocks_on_rank + embedding_on_rank

    largest_module = max(spec.params.largest_layer // tp, 1)
    trainable, quantized = total, 0
    if lora_rank:
        is_enc_dec = spec.family is ModelFamily.ENCODER_DECODER
        trainable = int(adapter_params_per_block(spec, lora_rank, is_enc_dec) * blocks_on_rank / tp)
        if qlora:  # the adapted linear modules, not an MoE block's fused experts, which stay 16-bit
            adapted = adapted_linears(spec, is_enc_dec)
            quantized = int(sum(a.shape.params * a.share for a in adapted if a.quantized) * blocks_on_rank / tp)
    return RankParams(
        total=total,
        trainable=trainable,
        quantized=quantized,
        block=block,
        blocks_on_rank=blocks_on_rank,
        embedding=embedding_on_rank,
        largest_module=largest_module,
        experts=0 if lora_rank else int(experts_per_block / tp * blocks_on_rank),
    )


def linear_params(
    spec: ModelSpec, config: TrainingConfig, params: RankParams, *, include_experts: bool
) -> tuple[int, int]:
    """(weights of the blocks' linear layers, weights of the output head) on this rank:
    what autocast casts to 16 bits, and FP8 to 8. Embedding lookups and norms are not cast.
    include_experts: the experts this rank holds, 1/ep of each block's under expert parallelism (as rank_params).
    An MoE model's first dense_layers blocks hold a dense MLP of ffn_size instead: the average block."""
    tp, pp = config.tensor_parallel, config.pipeline_parallel
    is_enc_dec = spec.family is ModelFamily.ENCODER_DECODER
    shapes = block_linear_shapes(spec)
    per_block = float(sum(s.params for s in shapes))
    if spec.is_moe:
        experts = sum(s.params for s in shapes[-2:])
        dense_share = min(spec.dense_layers, spec.num_layers) / spec.num_layers
        dense_mlp = (3 if spec.mlp_kind is MlpKind.GATED else 2) * spec.hidden_size * spec.ffn_size
        held = experts / config.expert_parallel if include_experts else 0.0
        shared = sum(s.params for s in shapes[len(attention_shapes(spec)) : -2])  # between attention and experts
        per_block += (held - experts) + (dense_mlp - held - shared) * dense_share  # no shared expert in dense blocks
    if is_enc_dec:
        cross = sum(s.params for s in attention_shapes(spec))
        blocks = per_block * spec.num_layers + cross * spec.num_decoder_layers
        block_linears = int(blocks / pp / tp)
    else:
        block_linears = int(per_block * params.blocks_on_rank / tp)
    head = spec.vocab_size * spec.hidden_size // tp if pp == 1 else 0
    tower = spec.vision_tower
    if tower is not None:  # LLaVA: the tower's blocks and the projector run under autocast too
        tower_blocks = sum(s.params for s in block_linear_shapes(tower)) * tower.num_layers
        block_linears += tower_blocks + spec.projector_params
    if spec.family is ModelFamily.ENCODER_ONLY and spec.output_head:
        head += spec.hidden_size * spec.hidden_size  # the MLM head's transform
    return block_linears, head
