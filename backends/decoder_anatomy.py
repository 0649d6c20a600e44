"""Where the parts of an HF decoder-only model live, per model_type.

Tensor and pipeline parallelism both need to run an unmodified HF model
piece by piece: embeddings, then some decoder layers, then the final norm
and the LM head. This file names those pieces and says how to call a layer
(what position information and mask it needs), so that the rest of the
parallel code stays architecture-neutral. Attention runs through SDPA with no
mask tensor, which is causal; padding masks are not supported here (training
batches are packed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from planner.errors import UserInputError


@dataclass(frozen=True)
class Architecture:
    """Module paths of one model family; paths inside a layer are relative to the layer."""

    backbone: str  # attribute path from the CausalLM to the module holding the layers
    token_embedding: str  # relative to the backbone
    layers: str
    final_norm: str
    layer_norms: tuple[str, ...]  # norms that feed a column-parallel projection
    column: tuple[tuple[str, int], ...]  # (path, fused sections)
    row: tuple[str, ...]
    attention: str
    head_count_attributes: tuple[str, ...] = ("num_heads", "num_key_value_heads", "num_attention_heads")
    width_attributes: tuple[str, ...] = ()  # attention attributes holding the local projection width
    kv_projections: tuple[str, ...] = ()  # replicated, not split, when tp exceeds the key/value heads
    extra_modules: tuple[str, ...] = field(default_factory=tuple)  # other backbone modules (positions, rotary)


_LLAMA_LIKE = Architecture(
    backbone="model",
    token_embedding="embed_tokens",
    layers="layers",
    final_norm="norm",
    layer_norms=("input_layernorm", "post_attention_layernorm"),
    column=(("self_attn.q_proj", 1), ("self_attn.k_proj", 1), ("self_attn.v_proj", 1),
            ("mlp.gate_proj", 1), ("mlp.up_proj", 1)),
    row=("self_attn.o_proj", "mlp.down_proj"),
    attention="self_attn",
    kv_projections=("self_attn.k_proj", "self_attn.v_proj"),
    extra_modules=("rotary_emb",),
)

ARCHITECTURES: dict[str, Architecture] = {
    "gpt2": Architecture(
        backbone="transformer",
        token_embedding="wte",
        layers="h",
        final_norm="ln_f",
        layer_norms=("ln_1", "ln_2"),
        column=(("attn.c_attn", 3), ("mlp.c_fc", 1)),
        row=("attn.c_proj", "mlp.c_proj"),
        attention="attn",
        width_attributes=("split_size", "embed_dim"),
        extra_modules=("wpe", "drop"),
    ),
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    "opt": Architecture(
        backbone="model.decoder",
        token_embedding="embed_tokens",
        layers="layers",
        final_norm="final_layer_norm",
        layer_norms=("self_attn_layer_norm", "final_layer_norm"),
        column=(("self_attn.q_proj", 1), ("self_attn.k_proj", 1), ("self_attn.v_proj", 1), ("fc1", 1)),
        row=("self_attn.out_proj", "fc2"),
        attention="self_attn",
        width_attributes=("embed_dim",),
        extra_modules=("embed_positions",),
    ),
}


def architecture_of(model: nn.Module) -> Architecture:
    config = model.config
    model_type = getattr(config, "model_type", None)
    if model_type not in ARCHITECTURES:
        raise UserInputError(
            f"tensor/pipeline parallelism has no plan for model_type '{model_type}'; "
            f"supported: {', '.join(sorted(ARCHITECTURES))}; use --tp 1 --pp 1 (ZeRO/FSDP) for this model"
        )
    if model_type == "opt" and (not config.do_layer_norm_before or config.word_embed_proj_dim != config.hidden_size):
        raise UserInputError("OPT variants with post-layer-norm or a projected embedding (opt-350m) are not supported by TP/PP")
    return ARCHITECTURES[model_type]


def get_path(root: nn.Module, path: str) -> Any:
    for part in path.split("."):
        root = getattr(root, part)
    return root


def set_path(root: nn.Module, path: str, value: Any) -> None:
    parent, _, name = path.rpartition(".")
    setattr(get_path(root, parent) if parent else root, name, value)


def embed(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Token (and learned position) embeddings, as the HF backbone computes them."""
    arch = architecture_of(model)
    backbone = get_path(model, arch.backbone)
    hidden = get_path(backbone, arch.token_embedding)(input_ids)
    positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
    model_type = model.config.model_type
    if model_type == "gpt2":
        hidden = backbone.drop(hidden + backbone.wpe(positions))
    elif model_type == "opt":
        hidden = hidden + backbone.embed_positions(None, 0, position_ids=positions)
    return hidden


def layer_arguments(model: nn.Module, hidden: torch.Tensor, seq_len: int) -> dict[str, Any]:
    """Keyword arguments every decoder layer needs for a sequence of seq_len (hidden may be a sequence shard)."""
    positions = torch.arange(seq_len, device=hidden.device).unsqueeze(0)
    arguments: dict[str, Any] = {"attention_mask": None, "position_ids": positions}
    rotary = getattr(get_path(model, architecture_of(model).backbone), "rotary_emb", None)
    if rotary is not None:
        arguments["position_embeddings"] = rotary(hidden, position_ids=positions)  # uses hidden's dtype only
    return arguments


def run_layer(layer: nn.Module, hidden: torch.Tensor, arguments: dict[str, Any]) -> torch.Tensor:
    out = layer(hidden, **arguments)
    return out[0] if isinstance(out, tuple) else out


def require_sdpa(model: nn.Module) -> None:
    """Layers are called without a mask tensor, which SDPA treats as causal (eager would not mask at all)."""
    model.config._attn_implementation = "sdpa"


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    arch = architecture_of(model)
    return get_path(get_path(model, arch.backbone), arch.layers)


def final_norm(model: nn.Module) -> nn.Module | None:
    arch = architecture_of(model)
    return getattr(get_path(model, arch.backbone), arch.final_norm, None)

