"""The model-family registry (planner/models/families.py) is complete for the catalog and true to transformers.

References: transformers' own classes (their _no_split_modules, their module trees) and the catalog's
stored config.json files. Every part that needs per-family knowledge reads the registry, so these checks
guard the config reader, the memory traits, FSDP wrapping, the search and the engine's tp/pp at once.
"""

from __future__ import annotations

import pytest

from planner.models.catalog import CATALOG_DIR, load_catalog
from planner.models.families import FAMILIES, parallel_model_types, splits_over_tp
from planner.models.hf_config import SUPPORTED_MODEL_TYPES
from planner.search.engine_layouts import ENGINE_MODEL_TYPES

CATALOG_TYPES = sorted({spec.model_type for spec in load_catalog()})


def catalog_config(model_type: str) -> dict:
    import json

    spec = next(spec for spec in load_catalog() if spec.model_type == model_type)
    return json.loads((CATALOG_DIR / "models" / f"{spec.name}.json").read_text())["config"]


def test_every_catalog_model_type_has_an_entry_and_every_entry_a_reader():
    assert set(CATALOG_TYPES) <= set(FAMILIES)
    assert set(SUPPORTED_MODEL_TYPES) == set(FAMILIES)  # the config reader reads what the registry lists
    assert ENGINE_MODEL_TYPES == parallel_model_types()
    assert parallel_model_types() == {
        "gpt2", "llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "opt", "deepseek_v2", "deepseek_v3"
    }  # fmt: skip
    not_over_tp = {model_type for model_type in parallel_model_types() if not splits_over_tp(model_type)}
    assert not_over_tp == {"deepseek_v2", "deepseek_v3"}


@pytest.mark.parametrize("model_type", CATALOG_TYPES)
def test_the_entry_is_complete_and_true_to_transformers(model_type):
    import transformers

    entry = FAMILIES[model_type]
    spec = next(spec for spec in load_catalog() if spec.model_type == model_type)
    assert entry.family == spec.family
    no_split = getattr(transformers, spec.transformers_class)._no_split_modules
    if no_split is None:  # composite models (LLaVA) gather their parts' lists when built
        from planner.models.param_count import build_meta_model

        no_split = build_meta_model(catalog_config(model_type))._no_split_modules
    assert set(entry.block_class.split(",")) <= set(no_split)
    config = catalog_config(model_type)
    config = config.get("text_config", config)  # a multimodal model's LLM names the sizes
    for role in ("hidden", "layers", "heads"):  # a smoke test can shrink every family's core sizes
        assert any(key in config for key in entry.size_keys[role]), (model_type, role)
    if entry.reader == "llama":
        assert entry.llama_style is not None and entry.llama_style.transformers_class == spec.transformers_class


@pytest.mark.parametrize("model_type", sorted(parallel_model_types()))
def test_parallel_plans_name_real_modules(model_type):
    """Every path of the tp/pp plan exists in a (tiny) model of the family, built by transformers itself."""
    import torch

    from backends.decoder_anatomy import get_path
    from backends.weights.model_factory import build_causal_lm, tiny_config

    plan = FAMILIES[model_type].parallel_plan
    model = build_causal_lm(tiny_config(catalog_config(model_type)))
    backbone = get_path(model, plan.backbone)
    layers = get_path(backbone, plan.layers)
    for path in (plan.token_embedding, plan.final_norm):
        assert get_path(backbone, path) is not None, path
    layer = layers[0]
    assert type(layer).__name__ == FAMILIES[model_type].block_class
    for path in (*plan.layer_norms, *(path for path, _ in plan.column), *plan.row, plan.attention, *plan.head_norms):
        assert get_path(layer, path) is not None, path
    if plan.moe_block:  # the router (kept whole) and the fused experts (split) the engine expects in it
        blocks = [get_path(layer, plan.moe_block) for layer in layers]
        block = next(block for block in blocks if hasattr(block, "experts"))  # (DeepSeek: dense first blocks)
        assert isinstance(block.gate.weight, torch.nn.Parameter) and block.experts.gate_up_proj.dim() == 3


# What a config.json may leave out is read at its family's transformers default: a minimal config of each family
# (its sizes, vocabulary, MLP width and kv heads, which the reader requires) must count what transformers builds.
# Not here: LLaVA (its sizes live in its parts' configs, each checked as its own family), and MPT, whose reader takes
# MosaicML's defaults (learned positions unless attn_config says ALiBi: planner/models/mpt_config.py) where
# transformers' MptConfig defaults to ALiBi.
MINIMAL_EXTRAS = {
    "phi3": dict(vocab_size=32064),  # its default pad token id (32000) must be in the vocabulary
    "whisper": dict(decoder_attention_heads=4, decoder_layers=2, decoder_ffn_dim=512, vocab_size=51865),
    "deepseek_v2": dict(moe_intermediate_size=128), "deepseek_v3": dict(moe_intermediate_size=128),
    "qwen2_moe": dict(moe_intermediate_size=128), "qwen3_moe": dict(moe_intermediate_size=128),
}  # fmt: skip
NO_KV_HEADS = {"gpt2", "gptj", "bloom", "opt", "mpt", "gpt_neox", "bert", "roberta", "t5", "vit", "clip", "whisper"}


@pytest.mark.parametrize("model_type", sorted(set(FAMILIES) - {"llava", "mpt"}))
def test_a_minimal_config_counts_what_transformers_builds(model_type):
    """Caught: Qwen3-MoE's head_dim (transformers 5 takes hidden / heads), DeepSeek-V2's query bottleneck (1536
    unless null), gpt-oss's attention biases (on unless said)."""
    import torch
    import transformers

    from planner.models.hf_config import spec_from_hf_config

    keys = FAMILIES[model_type].size_keys
    config = {keys["hidden"][0]: 256, keys["layers"][0]: 2, keys["heads"][0]: 4, "vocab_size": 1000}
    config |= {keys["ffn"][0]: 512} if keys.get("ffn") else {}
    config |= {} if model_type in NO_KV_HEADS else {"num_key_value_heads": 2}
    config |= MINIMAL_EXTRAS.get(model_type, {})
    spec = spec_from_hf_config({"model_type": model_type, **config}, name="minimal")
    with torch.device("meta"):
        model_class = getattr(transformers, spec.transformers_class)
        model = model_class._from_config(transformers.AutoConfig.for_model(model_type, **config))
    assert spec.params.total == sum(p.numel() for p in model.parameters())


def test_a_llava_config_without_a_vision_config_gets_transformers_tower():
    """LlavaConfig builds CLIP ViT-L/14-336 where the config names no vision_config, not CLIPVisionConfig's own
    defaults (ViT-B/32): the counts were 0.97x transformers'."""
    import torch
    import transformers

    from planner.models.hf_config import spec_from_hf_config

    text = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 512, "vocab_size": 1000}  # fmt: skip
    spec = spec_from_hf_config({"model_type": "llava", "text_config": text}, name="no-tower-config")
    with torch.device("meta"):
        config = transformers.AutoConfig.for_model("llava", text_config=text)
        model = transformers.LlavaForConditionalGeneration._from_config(config)
    assert spec.params.total == sum(p.numel() for p in model.parameters())
