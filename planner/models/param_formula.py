"""Parameter counts from architecture dimensions alone, exact for the layouts we know.

The planner needs counts for models it cannot (or does not want to) build on
the meta device: explicit dimensions typed on the command line, configs whose
transformers class is missing, and the per-block sizes the memory estimator
works with. The formula mirrors the transformers implementations module by
module, so for every catalog model it gives the same numbers as the meta-device
count (tests/test_catalog_counts.py holds it to that).

Two inputs:

- the architecture, a ModelArchitecture (a ModelSpec is one, with its counts)
  -- the dimensions every planner formula uses;
- a ParameterDetails: small per-architecture facts that move the count but are not
  worth a ModelSpec field (OPT's two spare position rows, BERT's token-type
  table and pooler, T5's relative-attention tables, Falcon's norm count...).
  hf_config.py reads them from the config; default_details() derives them from
  the model_type when only a spec is at hand.

    formula_param_counts(ModelArchitecture(hidden_size=4096, num_layers=32, num_heads=32,
                                           ffn_size=11008, vocab_size=32000,
                                           mlp_kind="gated", norm="rmsnorm", tied_embeddings=False,
                                           position_embedding="rotary"))
"""

from __future__ import annotations

from planner.models.param_details import ParameterDetails, default_details
from planner.models.spec import MlpKind, ModelArchitecture, ModelFamily, ModelSpec, ParamCounts


def _norm_params(arch: ModelArchitecture, details: ParameterDetails) -> int:
    # LayerNorm has a weight and a bias (unless the model drops it: MPT's no_bias); RMSNorm only a weight.
    with_bias = arch.norm == "layernorm" and details.norm_bias is not False
    return arch.hidden_size * (2 if with_bias else 1)


def _latent_attention_params(arch: ModelArchitecture) -> int:
    """MLA (DeepSeek-V2/V3, no biases): q through a normed q_lora_rank bottleneck or one projection; a
    kv_lora_rank latent (normed) plus a shared rotary key, expanded to every head's key and value."""
    hidden, heads = arch.hidden_size, arch.num_heads
    q_width = heads * arch.head_dim
    if arch.q_lora_rank:
        query = hidden * arch.q_lora_rank + arch.q_lora_rank + arch.q_lora_rank * q_width
    else:
        query = hidden * q_width
    nope = arch.head_dim - arch.qk_rope_head_dim
    latent = hidden * (arch.kv_lora_rank + arch.qk_rope_head_dim) + arch.kv_lora_rank
    expand = arch.kv_lora_rank * heads * (nope + arch.v_head_dim)
    return query + latent + expand + heads * arch.v_head_dim * hidden


def _attention_params(arch: ModelArchitecture, details: ParameterDetails) -> int:
    if arch.kv_lora_rank:
        return _latent_attention_params(arch)
    hidden, head_dim = arch.hidden_size, arch.head_dim
    q_width, kv_width = arch.num_heads * head_dim, arch.num_kv_heads * head_dim
    output_bias = arch.attention_bias if details.attention_output_bias is None else details.attention_output_bias
    params = hidden * (q_width + 2 * kv_width) + q_width * hidden
    if arch.attention_bias:
        params += q_width + (2 if details.key_bias else 1) * kv_width
    if output_bias:
        params += hidden
    if details.qk_norm:
        params += 2 * head_dim
    if details.attention_sinks:
        params += arch.num_heads
    return params


def _mlp_params(arch: ModelArchitecture, ffn_size: int, *, bias: bool | None = None) -> int:
    hidden = arch.hidden_size
    with_bias = arch.mlp_bias if bias is None else bias
    if arch.mlp_kind is MlpKind.GATED:
        return 3 * hidden * ffn_size + ((2 * ffn_size + hidden) if with_bias else 0)
    return 2 * hidden * ffn_size + ((ffn_size + hidden) if with_bias else 0)


def _expert_params(arch: ModelArchitecture, details: ParameterDetails) -> int:
    # transformers stores experts as fused tensors, bias-free but for gpt-oss's.
    return _mlp_params(arch, arch.expert_ffn_size or arch.ffn_size, bias=details.expert_bias)


def _moe_mlp_params(arch: ModelArchitecture, details: ParameterDetails) -> int:
    router = arch.num_experts * (arch.hidden_size + (1 if details.router_bias else 0))
    shared = 0
    if details.shared_expert_ffn_size:
        gate = arch.hidden_size if details.shared_expert_gate else 0
        shared = _mlp_params(arch, details.shared_expert_ffn_size, bias=False) + gate
    return router + arch.num_experts * _expert_params(arch, details) + shared


def _block_params(
    arch: ModelArchitecture, details: ParameterDetails, *, cross_attention: bool = False, moe: bool
) -> int:
    attention = _attention_params(arch, details) * (2 if cross_attention else 1)
    mlp = _moe_mlp_params(arch, details) if moe else _mlp_params(arch, arch.ffn_size)
    norms = details.norms_per_layer + (1 if cross_attention else 0)
    return attention + mlp + norms * _norm_params(arch, details)


def params_per_layer(spec: ModelArchitecture, details: ParameterDetails | None = None) -> int:
    """Parameters of one transformer block, all experts included for MoE.

    For encoder-decoder models this is the (larger) decoder block; T5's
    relative-attention table, held by the first block only, is left out.
    """
    details = details or default_details(spec)
    cross = spec.family is ModelFamily.ENCODER_DECODER
    return _block_params(spec, details, cross_attention=cross, moe=spec.num_experts > 0)


def _embedding_params(arch: ModelArchitecture, details: ParameterDetails) -> int:
    """Lookup tables plus an untied output head, as ParamCounts.embedding defines it."""
    token_width = details.embedding_projection_dim or arch.hidden_size
    params = details.patch_embedding_params or arch.vocab_size * token_width
    if arch.position_embedding == "learned":
        params += (arch.max_position_embeddings + details.position_offset) * arch.hidden_size
    params += details.token_type_vocab_size * arch.hidden_size
    params += arch.encoder_seq_len * arch.hidden_size  # Whisper's (frozen) sinusoid table over audio positions
    if not arch.tied_embeddings:
        params += arch.vocab_size * token_width + (arch.vocab_size if details.lm_head_bias else 0)
    return params


def _blocks_params(arch: ModelArchitecture, details: ParameterDetails) -> int:
    if arch.family is ModelFamily.ENCODER_DECODER:
        encoder = arch.num_encoder_layers * _block_params(arch, details, moe=False)
        decoder = arch.num_decoder_layers * _block_params(arch, details, cross_attention=True, moe=False)
        return encoder + decoder + 2 * details.relative_attention_buckets * arch.num_heads
    if arch.num_experts:
        dense = min(details.dense_layers, arch.num_layers)
        return dense * _block_params(arch, details, moe=False) + (arch.num_layers - dense) * _block_params(
            arch, details, moe=True
        )
    return arch.num_layers * _block_params(arch, details, moe=False)


def _other_params(arch: ModelArchitecture, details: ParameterDetails) -> int:
    """Everything outside blocks and lookup tables: final/embedding norms, projections, pooler."""
    params = (details.final_norms + (1 if details.embedding_norm else 0)) * _norm_params(arch, details)
    if details.embedding_projection_dim:
        params += 2 * arch.hidden_size * details.embedding_projection_dim  # project_in + project_out, no bias
    if details.pooler:
        params += arch.hidden_size * arch.hidden_size + arch.hidden_size
    return params + details.classifier_params + details.frontend_params


def _largest_module(arch: ModelArchitecture, details: ParameterDetails) -> int:
    """Most parameters held directly by one module: what ZeRO-3 gathers at once."""
    hidden, head_dim = arch.hidden_size, arch.head_dim
    q_width, kv_width = arch.num_heads * head_dim, arch.num_kv_heads * head_dim
    bias = arch.attention_bias
    token_width = details.embedding_projection_dim or hidden
    candidates = [details.patch_embedding_params or arch.vocab_size * token_width, details.classifier_params]
    if not arch.tied_embeddings:
        candidates.append(arch.vocab_size * token_width + (arch.vocab_size if details.lm_head_bias else 0))
    if arch.position_embedding == "learned":
        candidates.append((arch.max_position_embeddings + details.position_offset) * hidden)
    if details.fused_qkv:
        candidates.append(hidden * (q_width + 2 * kv_width) + ((q_width + 2 * kv_width) if bias else 0))
    else:
        candidates.append(hidden * q_width + (q_width if bias else 0))
    output_bias = bias if details.attention_output_bias is None else details.attention_output_bias
    candidates.append(q_width * hidden + (hidden if output_bias else 0))
    ffn = arch.ffn_size
    if details.fused_gate_up:
        candidates.append(2 * hidden * ffn)
    else:
        candidates.append(hidden * ffn + (ffn if arch.mlp_bias else 0))
    if arch.num_experts:
        candidates.append(arch.num_experts * _expert_params(arch, details))  # one fused experts module
    if details.pooler:
        candidates.append(hidden * hidden + hidden)
    return max(candidates)


def formula_param_counts(arch: ModelArchitecture, details: ParameterDetails | None = None) -> ParamCounts:
    """Total, active, embedding and largest-module counts computed from dimensions.

    arch is a ModelArchitecture (a ModelSpec is one); details defaults to what the
    model_type implies (see default_details).
    """
    details = details or default_details(arch)
    embedding = _embedding_params(arch, details)
    total = embedding + _blocks_params(arch, details) + _other_params(arch, details)
    active = total
    if arch.num_experts and arch.experts_per_token:
        moe_layers = arch.num_layers - min(details.dense_layers, arch.num_layers)
        active -= moe_layers * (arch.num_experts - arch.experts_per_token) * _expert_params(arch, details)
    counts = ParamCounts(
        total=total,
        trainable=total - arch.encoder_seq_len * arch.hidden_size,  # Whisper's sinusoid table is frozen
        active_per_token=active,
        embedding=embedding,
        largest_layer=_largest_module(arch, details),
        source="formula",
        source_detail=f"param_formula ({arch.model_type} layout)",
    )
    if isinstance(arch, ModelSpec) and arch.vision_tower is not None:  # LLaVA: its tower and projector count too
        tower = formula_param_counts(arch.vision_tower)
        counts = with_vision_tower(counts, tower, arch.projector_params, arch.hidden_size)
    return counts


def with_vision_tower(llm: ParamCounts, tower: ParamCounts, projector: int, hidden: int) -> ParamCounts:
    """Counts of an LLM with a vision tower and a projector (LLaVA): every part trained, the tower's
    patch projection and position table counted as embedding (as for ViT)."""
    extra = tower.total + projector
    return llm.model_copy(
        update={
            "total": llm.total + extra,
            "trainable": llm.trainable + tower.trainable + projector,
            "active_per_token": llm.active_per_token + extra,
            "embedding": llm.embedding + tower.embedding,
            "largest_layer": max(llm.largest_layer, tower.largest_layer, hidden * hidden + hidden),
        }
    )
