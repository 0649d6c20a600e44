"""Where the parts of an HF decoder-only model live, per model_type, and how to call them.

Tensor and pipeline parallelism both need to run an unmodified HF model
piece by piece: embeddings, then some decoder layers, then the final norm
and the LM head. The pieces are named by the model-family registry
(planner/models/families.py, ParallelPlan); this file finds them in a model
and says how to call a layer (what position information and mask it needs),
so that the rest of the parallel code stays architecture-neutral. Attention runs through SDPA with no
mask tensor, which is causal; padding masks are not supported here (training
batches are packed).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from planner.errors import UserInputError
from planner.models.families import FAMILIES, ParallelPlan

# The tp/pp plan of each family (module paths, column and row projections, split points) is registry data.
Architecture = ParallelPlan
ARCHITECTURES: dict[str, ParallelPlan] = {
    model_type: entry.parallel_plan for model_type, entry in FAMILIES.items() if entry.parallel_plan is not None
}


def architecture_of(model: nn.Module) -> Architecture:
    config = getattr(model, "config", None)
    if config is None:  # not a transformers model: nothing says where its blocks and heads are
        raise UserInputError(
            f"tensor/pipeline parallelism splits Hugging Face models of known families; {type(model).__name__} "
            "is not one: use tp 1 and pp 1 (ZeRO 1-3 trains any module)"
        )
    model_type = getattr(config, "model_type", None)
    if model_type not in ARCHITECTURES:
        raise UserInputError(
            f"tensor/pipeline parallelism has no plan for model_type '{model_type}'; "
            f"supported: {', '.join(sorted(ARCHITECTURES))}; use --tp 1 --pp 1 (ZeRO/FSDP) for this model"
        )
    if model_type == "opt" and (not config.do_layer_norm_before or config.word_embed_proj_dim != config.hidden_size):
        raise UserInputError(
            "OPT variants with post-layer-norm or a projected embedding (opt-350m) are not supported by TP/PP"
        )
    return ARCHITECTURES[model_type]


def get_path(root: nn.Module, path: str) -> Any:
    for part in path.split("."):
        root = getattr(root, part)
    return root


def set_path(root: nn.Module, path: str, value: Any) -> None:
    parent, _, name = path.rpartition(".")
    setattr(get_path(root, parent) if parent else root, name, value)


def embed(model: nn.Module, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
    """Token (and learned position) embeddings, as the HF backbone computes them; positions (1, n): the
    tokens' true positions when they are not 0..n-1 (context parallelism)."""
    arch = architecture_of(model)
    backbone = get_path(model, arch.backbone)
    hidden = get_path(backbone, arch.token_embedding)(input_ids)
    if positions is None:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
    model_type = model.config.model_type
    if model_type == "gpt2":
        hidden = backbone.drop(hidden + backbone.wpe(positions))
    elif model_type == "opt":
        hidden = hidden + backbone.embed_positions(None, 0, position_ids=positions)
    return hidden


def layer_arguments(
    model: nn.Module, hidden: torch.Tensor, seq_len: int, positions: torch.Tensor | None = None
) -> dict[str, Any]:
    """Keyword arguments every decoder layer needs for a sequence of seq_len (hidden may be a sequence shard);
    positions (1, seq_len): the tokens' true positions when they are not 0..seq_len-1 (context parallelism)."""
    if positions is None:
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


def repeated_blocks(model: Any) -> list[Any]:
    """The transformer blocks: the children of the largest ModuleList."""
    lists = [module for module in model.modules() if isinstance(module, torch.nn.ModuleList)]
    if not lists:
        return []
    biggest = max(lists, key=lambda blocks: sum(p.numel() for p in blocks.parameters()))
    return list(biggest)
