"""What a Megatron-Core block built with Transformer Engine keeps for backward, per token.

The rest of the activation estimate counts the tensors transformers' blocks keep (activations.py, checked by
traces). Megatron-Core's GPT layer with the Transformer Engine spec (get_gpt_layer_with_transformer_engine_spec)
keeps fewer: its norms are fused into the next linear, its attention keeps keys and values at their own heads,
its SwiGLU keeps only its input. Read in the code (Transformer Engine at d0067d0d, Megatron-LM at d98e8a64;
docs/accuracy.md, "Megatron-Core's blocks"), not traced: this machine cannot run Transformer Engine.

- Each norm is fused into the linear it feeds (TELayerNormColumnParallelLinear, `_LayerNormLinear.forward`,
  transformer_engine/pytorch/module/layernorm_linear.py): it keeps its input (the residual stream, 16 bits), its
  output (16 bits; under FP8 the FP8 copy the norm kernel writes, 1 byte) and fp32 rsigma per token (and mu for a
  LayerNorm). Under sequence parallelism all three are the rank's sequence shard: the gathered output is freed
  after the GEMM and gathered again in backward.
- Fused attention (`FusedAttnFunc.forward`, attention/dot_product_attention/backends.py) keeps q, k and v, keys
  and values at their own heads (no repeat for grouped queries; v a contiguous copy), its output, and fp32
  softmax statistics per query head; FP8 attention is off by default (fp8_dot_product_attention). Fused RoPE keeps
  only its frequencies (`FusedRoPEFunc`, attention/rope.py). A q/k norm (Qwen3) keeps its input and rsigma.
- The output projection and fc2 (`_Linear.forward`, module/linear.py) keep their inputs: the producer's own tensor
  in 16 bits; under FP8 an FP8 copy (1 byte, columnwise only), the 16-bit SwiGLU output then held by nothing.
- Megatron's fused SwiGLU (`SwiGLUFunction`, megatron/core/fusions/fused_bias_swiglu.py) keeps only fc1's output,
  2 x ffn wide, in 16 bits; a GELU MLP (bias_gelu fusion) its ffn-wide input.
- Residual adds and dropout at p = 0 keep nothing.
- An MoE block (TEGroupedMLP, as Megatron-Bridge's recipes run it: grouped GEMM, fused router, permutation and
  weighted SwiGLU, all-to-all dispatch) has a separate norm before its router (TE's RMSNorm: its input and rsigma);
  the router's gating linear keeps the norm's output, its fused top-k a boolean routing map and an fp32 copy of
  the scores, the fused auxiliary-loss scores another fp32 copy (E each a token); the fused permutation an int32
  index map of 2E + 1 a token, and with several local experts the two chunk sorts an int32 index a routed copy;
  fc1 keeps the permuted tokens (k of hidden width: themselves in 16 bits, an FP8 copy under FP8), the weighted
  SwiGLU fc1's output (2 x ffn each, 16 bits) and the routing probabilities (16 bits), fc2 the SwiGLU's output
  (itself or an FP8 copy); the all-to-alls and the unpermutation keep nothing more (megatron/core/transformer/moe/
  router.py, token_dispatcher.py, experts.py and moe_utils.py; transformer_engine/pytorch/permutation.py and
  router.py). The flex dispatcher's HybridEP keeps its own routing handle, not read: counted as the all-to-all's.

The fusions counted (bias_activation_fusion, apply_rope_fusion, moe_router_fusion, moe_permute_fusion,
moe_grouped_gemm) are off in TransformerConfig's defaults and on in Megatron-LM's command line and in
Megatron-Bridge's Llama and Qwen providers and recipes, whose runs docs/accuracy.md checks; unfused, the router and
permutation keep other tensors (int64 indices). The probabilities are counted in 16 bits (moe_router_dtype unset;
fp32 adds 2 bytes a routed copy).

Counted so where those readings hold: decoder-only blocks with 16-bit weights (no autocast), without dropout,
latent attention or context parallelism, and not under selective or op-level recomputation (counts_te_blocks);
elsewhere the transformers count stands (activations.py).
"""

from __future__ import annotations

from typing import NamedTuple

from planner.memory.arch_traits import arch_traits
from planner.models.spec import MlpKind, ModelFamily, ModelSpec
from planner.training_config import ActivationCheckpointing

# The activations' source where these counts apply (planner/memory/estimate.py).
TE_BLOCKS_SOURCE = (
    "formula: the tensors Megatron-Core's Transformer Engine blocks keep for backward, read in Transformer "
    "Engine's and Megatron-LM's code, not traced (planner/memory/te_blocks.py), per micro-batch in flight as "
    "Korthikanti et al. 2022 count them"
)


class TeLayout(NamedTuple):
    """What of the layout and widths the count reads (activations.py's ActivationShape and Widths)."""

    tensor_parallel: int
    sequence_parallel: bool
    fp8: bool
    width: int  # bytes of the 16-bit tensors


def counts_te_blocks(
    spec: ModelSpec, layout: TeLayout, checkpointing: ActivationCheckpointing, *, cp: int, autocast: bool
) -> bool:
    """Whether the readings above hold for this block and layout (cp: context parallelism)."""
    return (
        spec.family is ModelFamily.DECODER_ONLY
        and not spec.is_mla
        and layout.width == 2
        and not autocast
        and spec.hidden_dropout == 0
        and spec.attention_dropout == 0
        and cp == 1
        and checkpointing in (ActivationCheckpointing.NONE, ActivationCheckpointing.FULL)
        # Megatron-Core trains MoE under tensor parallelism only with sequence parallelism (moe_layer.py).
        and not (spec.is_moe and layout.tensor_parallel > 1 and not layout.sequence_parallel)
    )


def te_block(spec: ModelSpec, layout: TeLayout, routed_load: float = 1.0) -> float:
    """Bytes one block keeps per token on one tensor-parallel rank (the average block where an MoE model's first
    blocks are dense); routed_load: the busiest expert-parallel rank's routed copies, in even shares."""
    dense = te_attention_half(spec, layout, fused_norms=2) + te_dense_mlp(spec, layout)
    if not spec.is_moe:
        return dense
    moe = te_attention_half(spec, layout, fused_norms=1) + te_moe_mlp(spec, layout, routed_load)
    dense_share = min(spec.dense_layers, spec.num_layers) / spec.num_layers
    return dense * dense_share + moe * (1 - dense_share)


def te_attention_half(spec: ModelSpec, layout: TeLayout, fused_norms: int) -> float:
    """Bytes per token on one tensor-parallel rank from the block's input to its attention's residual add, with
    the norms fused into a linear: the one before attention, and in a dense block the one fused into fc1."""
    w, h = layout.width, spec.hidden_size
    norm_output = 1 if layout.fp8 else w
    norm = (w + norm_output) * h + 4 + (4 if spec.norm == "layernorm" else 0)  # input, output, rsigma (and mu)
    hidden_split = layout.tensor_parallel if layout.sequence_parallel else 1
    q_width, kv_width = spec.num_heads * spec.head_dim, spec.kv_size
    queries = 2 * q_width * w + 4 * spec.num_heads  # q and the output; softmax statistics
    keys_values = 2 * kv_width * w
    if arch_traits(spec).qk_norm:
        queries += q_width * w + 4 * spec.num_heads  # the q norm's input and rsigma
        keys_values += kv_width * w + 4 * spec.num_kv_heads
    if layout.fp8:
        queries += q_width  # the output projection's FP8 copy of its input
    # Past the key-value heads' count tensor parallelism replicates them (each rank keeps a whole head).
    kv_split = min(layout.tensor_parallel, spec.num_kv_heads)
    return fused_norms * norm / hidden_split + queries / layout.tensor_parallel + keys_values / kv_split


def te_dense_mlp(spec: ModelSpec, layout: TeLayout) -> float:
    """Bytes per token on one tensor-parallel rank of a dense MLP after its fused norm: fc1's output (kept by the
    fused activation) and the activation's output (fc2's input: itself in 16 bits, an FP8 copy under FP8)."""
    w, ffn = layout.width, spec.ffn_size
    fc1_output = (2 if spec.mlp_kind is MlpKind.GATED else 1) * ffn * w
    return (fc1_output + ffn * (1 if layout.fp8 else w)) / layout.tensor_parallel


def te_moe_mlp(spec: ModelSpec, layout: TeLayout, routed_load: float) -> float:
    """Bytes per token on one tensor-parallel rank of an MoE MLP from its norm to its combine (the docstring's
    reading), for k routed copies of each token times the busiest rank's load. The norm, router and permutation
    run on the rank's sequence shard; the experts' tensor parallelism is the model's (Megatron-Core's default
    expert_tensor_parallel_size), whose dispatcher all-gathers the routed tokens and their probabilities over the
    tensor-parallel ranks, so those are whole on each and only the ffn-wide tensors split."""
    w, h, experts, tp = layout.width, spec.hidden_size, spec.num_experts, layout.tensor_parallel
    ffn = spec.expert_ffn_size or spec.ffn_size
    k = spec.experts_per_token * routed_load
    copy = 1 if layout.fp8 else w  # what fc1 and fc2 keep of their inputs
    local = (w * h + 4) + w * h  # the norm's input and rsigma; the gating linear's input
    local += 9 * experts + (8 * experts + 4)  # the router's map and score copies; the permutation's map
    gathered = k * (h * copy + 8 + 2)  # fc1's input, the chunk sorts' indices and the probabilities per copy
    split = k * (2 * ffn * w + ffn * copy)  # fc1's output, fc2's input
    traits = arch_traits(spec)
    if traits.shared_expert:  # an always-on MLP of TE linears beside the experts, on the norm's output
        shared_ffn = spec.shared_expert_ffn_size or spec.ffn_size
        local += (h if layout.fp8 else 0) + (h * w if traits.shared_expert_gate else 0)  # FP8 input; gated output
        split += 2 * shared_ffn * w + shared_ffn * copy
    hidden_split = tp if layout.sequence_parallel else 1
    return local / hidden_split + gathered + split / tp
