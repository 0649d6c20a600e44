"""The Hugging Face config a run folder builds its model from, and the model's block class.

The emitted files must be runnable without the hub, so the run folder carries
the model's config.json dict: the catalog's stored copy, the user's config
file, or (for models described by dimensions) a config synthesised from the
spec. The decoder-block class name drives FSDP's auto-wrap policy; it comes
from the model-family registry (planner/models/families.py), checked against
transformers' `_no_split_modules` in the tests, so emitting needs neither
torch nor transformers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planner.models.catalog import CATALOG_DIR, find_model
from planner.models.dimension_configs import POSITIONS_OF_SPEC, dimension_config
from planner.models.families import FAMILIES
from planner.models.spec import ModelSpec

# model_type -> the transformer block class, from the registry (transformers' _no_split_modules, minus embeddings).
DECODER_LAYER_CLASS: dict[str, str] = {model_type: entry.block_class for model_type, entry in FAMILIES.items()}


def decoder_layer_class(spec: ModelSpec) -> str:
    known = DECODER_LAYER_CLASS.get(spec.model_type)
    if known is not None:
        return known
    # A model_type outside the table: ask transformers (imports it; rare).
    import transformers

    model_class = getattr(transformers, spec.transformers_class, None)
    blocks = [name for name in getattr(model_class, "_no_split_modules", None) or [] if "Embedding" not in name]
    if not blocks:
        raise ValueError(f"no transformer block class known for model_type '{spec.model_type}'")
    return blocks[0]


def hf_config_for(spec: ModelSpec) -> dict[str, Any]:
    """The config.json dict that rebuilds this model with transformers."""
    origin = Path(spec.origin) if spec.origin not in ("catalog", "dimensions", "parameter count") else None
    if origin is not None and origin.is_file():
        return json.loads(origin.read_text(encoding="utf-8"))
    catalog_entry = find_model(spec.name)
    if catalog_entry is not None and catalog_entry.name == spec.name:
        stored = json.loads((CATALOG_DIR / "models" / f"{spec.name}.json").read_text(encoding="utf-8"))
        return stored["config"]
    return _synthesised_config(spec)


def _synthesised_config(spec: ModelSpec) -> dict[str, Any]:
    """The config a model given by its dimensions was read from (planner/models/dimension_configs.py)."""
    return dimension_config(
        hidden=spec.hidden_size,
        layers=spec.num_layers,
        heads=spec.num_heads,
        kv_heads=spec.num_kv_heads,
        ffn=spec.expert_ffn_size or spec.ffn_size,
        vocab=spec.vocab_size,
        experts=spec.num_experts,
        top_k=spec.experts_per_token or None,
        mlp=spec.mlp_kind.value,
        positions=POSITIONS_OF_SPEC.get(spec.position_embedding, "rope"),
        max_positions=spec.max_position_embeddings,
    )
