"""Read an MPT config.json (model_type "mpt": MosaicML's MPT-7B/30B and llm-foundry models).

MPT names its dimensions d_model, n_heads and n_layers, sizes its MLP by expansion_ratio (or
ffn_config.ffn_hidden_size), and keeps its attention settings in an attn_config block. The layout follows
the model's own code (modeling_mpt.py in mosaicml/mpt-7b, llm-foundry's MPTModel):

- Wqkv is one fused projection (kv_n_heads of them for grouped-query attention), out_proj another;
- no_bias takes the bias off every Linear and every LayerNorm;
- positions: ALiBi when attn_config.alibi (no table), rotary when attn_config.rope, else a learned table of
  max_seq_len rows when learned_pos_emb, else none at all;
- the token table is the output head unless tie_word_embeddings is false.

transformers' own MptForCausalLM always builds ALiBi and a bias-free 4 x d_model MLP; for mosaicml/mpt-7b
(expansion_ratio 4, no_bias, alibi) that is the same model, and the count tests build it on the meta device.
"""

from __future__ import annotations

from typing import Literal

from planner.models.config_fields import ConfigFields, basic_dims
from planner.models.param_details import ParameterDetails
from planner.models.parsed_config import ParsedConfig
from planner.models.spec import MlpKind, ModelArchitecture

_NORMS: dict[str, Literal["layernorm", "rmsnorm"]] = {"layernorm": "layernorm", "low_precision_layernorm": "layernorm", "rmsnorm": "rmsnorm",
          "low_precision_rmsnorm": "rmsnorm"}  # fmt: skip
_FFN_TYPES = {"mptmlp": MlpKind.STANDARD, "mptglu": MlpKind.GATED}


def _block(f: ConfigFields, name: str) -> ConfigFields:
    """A nested settings block, its fields read (and named in errors) as name.field."""
    value = f.config.get(name) or {}
    if not isinstance(value, dict):
        raise f.error(name, f"must be a block of settings, not {value!r}")
    return ConfigFields({f"{name}.{key}": item for key, item in value.items()}, f.source)


def _ffn_size(f: ConfigFields, ffn: ConfigFields, hidden: int) -> int:
    if ffn.config.get("ffn_config.ffn_hidden_size") is not None:
        return ffn.int("ffn_config.ffn_hidden_size")
    ratio = f.config.get("expansion_ratio", 4)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 0:
        raise f.error("expansion_ratio", f"must be a positive number, got {ratio!r}")
    size = int(hidden * ratio)  # llm-foundry's ffn_hidden_size
    if size < 1:
        raise f.error("expansion_ratio", f"({ratio}) leaves no MLP width at d_model {hidden}")
    return size


def _positions(f: ConfigFields, attn: ConfigFields) -> Literal["alibi", "rotary", "learned", "none"]:
    if attn.bool("attn_config.alibi", False):
        return "alibi"
    if attn.bool("attn_config.rope", False):
        return "rotary"
    return "learned" if f.bool("learned_pos_emb", True) else "none"


def read_mpt(f: ConfigFields, model_type: str) -> ParsedConfig:
    dims = basic_dims(f, hidden=("d_model",), layers=("n_layers",), heads=("n_heads",))
    attn, ffn = _block(f, "attn_config"), _block(f, "ffn_config")
    heads, hidden = dims["num_heads"], dims["hidden_size"]
    attn_type = attn.str("attn_config.attn_type", default="multihead_attention")
    if attn_type == "multiquery_attention":
        kv_heads = 1
    elif attn_type == "grouped_query_attention":
        kv_heads = attn.kv_heads(heads, None, "attn_config.kv_n_heads")
    elif attn_type == "multihead_attention":
        kv_heads = heads
    else:
        raise attn.error("attn_config.attn_type", f"{attn_type!r} is not an MPT self-attention type "
                         "(multihead_attention, multiquery_attention, grouped_query_attention)")  # fmt: skip
    if attn.bool("attn_config.qk_ln", False) or attn.bool("attn_config.qk_gn", False):
        raise attn.error("attn_config.qk_ln", "is true: per-head query/key norms of MPT are not modelled; "
                         "describe the model with the dimension flags")  # fmt: skip
    ffn_type = ffn.str("ffn_config.ffn_type", default="mptmlp")
    if ffn_type not in _FFN_TYPES:
        raise ffn.error("ffn_config.ffn_type", f"{ffn_type!r} is not modelled (mptmlp, mptglu)")
    norm_type = f.str("norm_type", default="low_precision_layernorm")
    if norm_type.lower() not in _NORMS:
        raise f.error("norm_type", f"{norm_type!r} is not an MPT norm ({', '.join(_NORMS)})")
    bias = not f.bool("no_bias", False)
    return ParsedConfig(
        dims=ModelArchitecture(
            model_type=model_type,
            **dims,
            num_kv_heads=kv_heads,
            ffn_size=_ffn_size(f, ffn, hidden),
            mlp_kind=_FFN_TYPES[ffn_type],
            activation="gelu",
            max_position_embeddings=f.int("max_seq_len", default=2048),
            tied_embeddings=f.bool("tie_word_embeddings", True),
            norm=_NORMS[norm_type.lower()],
            position_embedding=_positions(f, attn),
            attention_bias=bias,
            mlp_bias=bias,
            transformers_class="MptForCausalLM",
            hidden_dropout=f.probability("resid_pdrop"),
            attention_dropout=attn.probability("attn_config.attn_pdrop"),
        ),
        details=ParameterDetails(fused_qkv=True, norm_bias=bias),
    )
