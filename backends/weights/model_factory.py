"""Build the Hugging Face model a plan names, from the catalog config, with no hub access.

`tiny=True` keeps the architecture (model_type, MLP kind, GQA ratio, tied
embeddings) and shrinks the sizes so that tests and CPU runs take seconds.
"""

from __future__ import annotations

import copy
from typing import Any

GENERIC_SIZE_KEYS = {  # for a model_type the registry does not know
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "heads": ("num_attention_heads", "n_head", "num_heads"),
    "ffn": ("intermediate_size", "ffn_dim", "n_inner", "d_ff"),
    "positions": ("max_position_embeddings", "n_positions"),
}


def size_keys(model_type: str) -> dict[str, tuple[str, ...]]:
    """The config keys a family names its sizes with (planner/models/families.py)."""
    from planner.models.families import family_of

    entry = family_of(model_type)
    return dict(entry.size_keys) if entry is not None else GENERIC_SIZE_KEYS


TINY_SIZES = {"hidden": 64, "layers": 4, "heads": 4, "ffn": 128, "positions": 256, "vocab_size": 512}


def tiny_config(config: dict[str, Any], **sizes: int) -> dict[str, Any]:
    """A copy of an HF config dict with small dimensions, same architecture."""
    wanted = {**TINY_SIZES, **sizes}
    tiny = copy.deepcopy(config)
    keys_of = size_keys(str(tiny.get("model_type")))
    original_heads = next((tiny[key] for key in keys_of.get("heads", ()) if key in tiny), None)
    for role, keys in keys_of.items():
        for key in keys:
            if key in tiny and tiny[key] is not None:
                tiny[key] = wanted[role]
    tiny["vocab_size"] = wanted["vocab_size"]
    if "num_key_value_heads" in tiny and original_heads:
        original_kv = tiny["num_key_value_heads"] or original_heads
        ratio = max(1, original_heads // max(1, original_kv))
        # Keep GQA grouped but with at least 2 KV heads, so that TP=2 can split them.
        tiny["num_key_value_heads"] = max(min(2, original_kv), wanted["heads"] // ratio)
    if "head_dim" in tiny:
        tiny["head_dim"] = wanted["hidden"] // wanted["heads"]
    tiny.pop("rope_scaling", None)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
        if isinstance(tiny.get(key), int) and tiny[key] >= wanted["vocab_size"]:
            tiny[key] = wanted["vocab_size"] - 1
        elif isinstance(tiny.get(key), list):
            tiny[key] = [min(token, wanted["vocab_size"] - 1) for token in tiny[key]]
    return tiny


def catalog_config(model_name: str) -> dict[str, Any]:
    """The stored HF config.json dict of a catalog model (name, alias or HF id)."""
    import json

    from planner.errors import UserInputError
    from planner.models.catalog import CATALOG_DIR, find_model

    spec = find_model(model_name)
    if spec is None:
        raise UserInputError(f"unknown catalog model '{model_name}'; see `hardware-selector models`")
    with open(CATALOG_DIR / "models" / f"{spec.name}.json", encoding="utf-8") as handle:
        return json.load(handle)["config"]


def build_causal_lm(config: dict[str, Any], *, seed: int = 0, dtype: Any = None, dropout: float = 0.0) -> Any:
    """A randomly initialised transformers causal LM for an HF config dict (deterministic per seed).

    Dropout defaults to 0 so that multi-rank runs can be compared with a
    single-process reference bit for bit.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = dict(config)
    model_type = fields.pop("model_type")
    for key in (
        "attn_pdrop",
        "embd_pdrop",
        "resid_pdrop",
        "attention_dropout",
        "hidden_dropout",
        "dropout",
        "activation_dropout",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
    ):
        if key in fields:
            fields[key] = dropout
    hf_config = AutoConfig.for_model(model_type, **fields)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config, trust_remote_code=False)
    if getattr(hf_config, "tie_word_embeddings", False):
        model.tie_weights()
    if dtype is not None:
        model = model.to(dtype)
    return model
