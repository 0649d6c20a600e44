"""Op-level selective activation checkpointing (`--ac op`): which tensors one block keeps for backward.

The policy is torchtitan's `selective_ac_option = "op"` (`_save_list` and `_custom_policy` in
torchtitan/parallelisms/parallelize_llama.py at 9dec370, torchtitan/models/llama3/parallelize_llama.py at e7c0cae;
torchtitan/distributed/activation_checkpoint.py since):
inside each checkpointed block, keep the output of every matmul but every second one (counted from the block's
first, afresh in each block) and the fused attention kernel's output; recompute everything else in backward
(norms, rotary, the MLP's activation and product, the skipped matmuls, the repeated keys and values) from the
block's input, which is kept as under full checkpointing. Our backends run the same rule over every linear,
biased or not (backends/parts/op_checkpoint_policy.py); an unfused (eager) attention's products and softmax are
not one kernel and are recomputed too. Under tensor parallelism torchtitan also keeps its reduce-scatters' outputs
(and amax results for float8); ours keeps no collective's output, so its recomputation runs them again
(planner/throughput/communication.py counts them).

Per token of one block, on one tensor-parallel rank: the kept matmul outputs (the column-parallel q, k, v,
gate and up split over tp; the row-parallel o and down outputs are whole partial sums before their reduction)
and, with a fused kernel, its output and fp32 logsumexp. Dense blocks only: a routed MoE block's expert
matmuls, latent attention's extra projections and an encoder-decoder's cross-attention have no traced count
here, so op-level checkpointing of those refuses in one line (`check_supported`). docs/accuracy.md, "Op-level
checkpointing", compares the count with a trace and with torchtitan's printed memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import UserInputError
from planner.memory.arch_traits import arch_traits
from planner.memory.spec_cache import per_spec
from planner.models.spec import MlpKind, ModelFamily, ModelSpec


@dataclass(frozen=True)
class BlockMatmul:
    """One matmul of a block, in forward order: its weight's shape, and whether tp splits its output."""

    fan_in: int
    fan_out: int
    output_split_by_tp: bool  # column-parallel (q, k, v, gate, up); row-parallel outputs are whole


def supports(spec: ModelSpec) -> bool:
    """Whether op-level checkpointing is counted for this model (the search leaves it out otherwise)."""
    return not _unsupported(spec)


def check_supported(spec: ModelSpec) -> None:
    """Op-level checkpointing is counted for dense blocks; anything else is one line, not a guess."""
    unsupported = _unsupported(spec)
    if unsupported:
        raise UserInputError(
            f"--ac op: op-level checkpointing is counted for dense blocks, and {spec.name} has {unsupported}; "
            "use --ac selective or --ac full"
        )


def _unsupported(spec: ModelSpec) -> str:
    return (
        "routed experts" if spec.is_moe
        else "latent attention" if spec.is_mla
        else "an encoder-decoder" if spec.family is ModelFamily.ENCODER_DECODER
        else "a vision tower" if spec.vision_tower is not None
        else ""
    )  # fmt: skip


@per_spec
def block_matmuls(spec: ModelSpec) -> tuple[BlockMatmul, ...]:
    """The block's matmuls in the order its forward runs them (transformers' modules: q, k, v, o, then gate,
    up, down; fused projections are one matmul)."""
    traits = arch_traits(spec)
    h, q_width, kv_width = spec.hidden_size, spec.num_heads * spec.head_dim, spec.kv_size
    if traits.qkv_projections == 1:
        attention = [BlockMatmul(h, q_width + 2 * kv_width, True)]
    else:
        attention = [BlockMatmul(h, q_width, True), BlockMatmul(h, kv_width, True), BlockMatmul(h, kv_width, True)]
    attention.append(BlockMatmul(q_width, h, False))
    ffn = spec.ffn_size
    if spec.mlp_kind is MlpKind.GATED and traits.mlp_input_projections == 2:
        mlp_in = [BlockMatmul(h, ffn, True), BlockMatmul(h, ffn, True)]
    else:
        mlp_in = [BlockMatmul(h, (2 if spec.mlp_kind is MlpKind.GATED else 1) * ffn, True)]
    return (*attention, *mlp_in, BlockMatmul(ffn, h, False))


def kept_matmuls(spec: ModelSpec) -> tuple[BlockMatmul, ...]:
    """The 1st, 3rd, 5th, ... matmul of the block: the ones whose outputs the policy keeps."""
    return block_matmuls(spec)[::2]


def kept_bytes_per_token(spec: ModelSpec, *, tensor_parallel: int, width: int, fused_attention: bool) -> float:
    """Bytes one block keeps per token beyond its input: the kept matmul outputs (`width` bytes per element)
    and, with a fused attention kernel, its output and fp32 logsumexp (one per head)."""
    check_supported(spec)
    kept = sum(m.fan_out / (tensor_parallel if m.output_split_by_tp else 1) for m in kept_matmuls(spec)) * width
    if fused_attention:
        kept += (spec.num_heads * spec.head_dim * width + spec.num_heads * 4) / tensor_parallel
    return kept


def last_output_bytes_per_token(spec: ModelSpec, *, tensor_parallel: int, width: int) -> float:
    """The block's last matmul output when the policy keeps it (an odd count: Llama's down projection): the
    recomputation stops before that matmul, so its kept output is not consumed and stays beside the rebuilt block
    (a trace of one Llama block: op's peak is full's plus hidden x width per token)."""
    matmuls = block_matmuls(spec)
    if len(matmuls) % 2 == 0:
        return 0.0
    last = matmuls[-1]
    return last.fan_out / (tensor_parallel if last.output_split_by_tp else 1) * width


def recomputed_matmuls(spec: ModelSpec) -> tuple[BlockMatmul, ...]:
    """The skipped matmuls backward runs again: all but the block's last, whose output only feeds the residual
    add (no backward reads it, and torch's non-reentrant checkpoint stops recomputing before it)."""
    return block_matmuls(spec)[:-1][1::2]


def recomputed_matmul_share(spec: ModelSpec) -> float:
    """The share of the block's matmul FLOPs that backward runs again."""
    total = sum(m.fan_in * m.fan_out for m in block_matmuls(spec))
    return sum(m.fan_in * m.fan_out for m in recomputed_matmuls(spec)) / total if total else 0.0
