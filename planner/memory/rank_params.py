"""How many parameters the most loaded rank holds, before data-parallel sharding.

Tensor parallelism splits each block's matrices and the vocabulary; pipeline
parallelism gives each stage layers/pp blocks, the first stage the embedding
and the last the output head (a second copy when tied and pp > 1); expert
parallelism splits the experts. LoRA freezes the base and trains r*(in+out)
per adapted matrix (planner/memory/lora_targets.py: what PEFT's
target_modules="all-linear" adapts).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.memory.linear_shapes import attention_shapes, block_linear_shapes
from planner.memory.lora_targets import (
    adapter_params_per_block,
    head_adapter_params,
    head_linears,
    quantized_params_per_block,
    vision_adapter_params,
)
from planner.memory.spec_cache import per_spec_and_key
from planner.models.spec import MlpKind, ModelFamily, ModelSpec
from planner.training_config import TrainingConfig

# NF4 stores 4 bits per weight plus double-quantised block constants:
# 0.127 bits per parameter (QLoRA paper, Sec. 3), i.e. 4.127 bits in all.
QLORA_BYTES_PER_PARAM = 4.127 / 8


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
        vision_adapters, vision_4bit = vision_adapter_params(spec, lora_rank)  # LLaVA's, on the first stage
        trainable = int(adapter_params_per_block(spec, lora_rank, is_enc_dec, ep) * blocks_on_rank / tp)
        trainable += int(vision_adapters + head_adapter_params(spec, lora_rank))
        if qlora:  # the exact nn.Linear modules: an MoE block's fused experts stay 16-bit
            beside = sum(shape.params for shape in head_linears(spec))  # a pooler or a classifier
            quantized = int(quantized_params_per_block(spec, is_enc_dec) * blocks_on_rank / tp + vision_4bit + beside)
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
