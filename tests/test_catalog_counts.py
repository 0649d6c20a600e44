"""The model catalog's parameter counts: exact, reproducible, and in line with what is published.

(a) a sample of models rebuilt on the meta device gives the stored counts;
(b) totals agree with the figures the model authors published;
(c) the dimension-only formula agrees with the meta-device count for every model;
(d) the stored specs are what planner.models.hf_config reads from the stored configs.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

from planner.models.catalog import CATALOG_DIR, CATALOG_FILE, normalize_name
from planner.models.hf_config import parse_hf_config, spec_from_hf_config
from planner.models.param_formula import formula_param_counts, params_per_layer
from planner.models.spec import ModelSpec

MODELS_DIR = CATALOG_DIR / "models"
COUNT_FIELDS = ("total", "trainable", "active_per_token", "embedding", "largest_layer")


@lru_cache(maxsize=1)
def catalog_document() -> dict:
    return json.loads(CATALOG_FILE.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def stored_specs() -> dict[str, ModelSpec]:
    return {entry["name"]: ModelSpec.model_validate(entry) for entry in catalog_document()["models"]}


@lru_cache(maxsize=1)
def entries() -> dict[str, dict]:
    loaded = (json.loads(path.read_text(encoding="utf-8")) for path in sorted(MODELS_DIR.glob("*.json")))
    return {entry["name"]: entry for entry in loaded}


ALL_MODELS = sorted(entries())


# --- the catalog files themselves ---------------------------------------------------------------


def test_catalog_has_every_entry_sorted_by_name():
    document = catalog_document()
    assert document["schema_version"] == 1
    assert document["generated_by"] == "scripts/build_catalog.py"
    names = [model["name"] for model in document["models"]]
    assert names == sorted(names) == ALL_MODELS
    assert len(names) >= 40


def test_entry_files_are_named_after_their_model():
    for path in MODELS_DIR.glob("*.json"):
        assert json.loads(path.read_text())["name"] == path.stem


def test_names_aliases_and_hf_ids_select_one_model_each():
    owner_of: dict[str, str] = {}
    for name, entry in entries().items():
        keys = {normalize_name(n) for n in [name, *entry["aliases"]]}
        assert len(keys) == 1 + len(entry["aliases"]), f"{name}: an alias repeats another name"
        if entry["hf_id"]:
            keys |= {normalize_name(entry["hf_id"]), normalize_name(entry["hf_id"].split("/")[-1])}
        for key in keys:
            assert owner_of.setdefault(key, name) == name, f"'{key}' names both {owner_of[key]} and {name}"


# --- (a) rebuilding a sample on the meta device reproduces the stored counts ---------------------

# One model of each kind, with the path of a transformer block inside the transformers model.
META_SAMPLE = {
    "gpt2": "transformer.h.0",  # tied embeddings, learned positions, Conv1D
    "llama-3-8b": "model.layers.0",  # grouped-query attention, untied head
    "mixtral-8x7b": "model.layers.0",  # MoE with fused expert tensors
    "qwen1.5-moe-a2.7b": "model.layers.0",  # MoE with a shared expert
    "bert-base-uncased": "encoder.layer.0",  # encoder with pooler and token types
    "t5-small": "decoder.block.1",  # encoder-decoder, tied (block 0 also holds the relative bias table)
    "t0-3b": "decoder.block.1",  # T5 v1.1: gated-gelu, untied head
    "falcon-40b": "transformer.h.0",  # new decoder architecture, two norms, grouped kv
    "falcon-7b": "transformer.h.0",  # multi-query, one shared norm
    "opt-350m": "model.decoder.layers.0",  # post-norm with embedding projections
}


@pytest.fixture(scope="module")
def meta_models():
    pytest.importorskip("transformers")
    from planner.models.param_count import build_meta_model, count_params_on_meta

    return {
        name: (build_meta_model(entries()[name]["config"]), count_params_on_meta(entries()[name]["config"]))
        for name in META_SAMPLE
    }


@pytest.mark.parametrize("name", sorted(META_SAMPLE))
def test_meta_device_rebuild_matches_stored_counts(name, meta_models):
    _, counts = meta_models[name]
    stored = stored_specs()[name].params
    assert counts.model_dump(exclude={"source_detail"}) == stored.model_dump(exclude={"source_detail"})
    assert stored.source == "meta-device"
    assert stored.source_detail == f"transformers {catalog_document()['transformers_version']}"


@pytest.mark.parametrize("name", sorted(META_SAMPLE))
def test_stored_class_is_the_one_built(name, meta_models):
    model, _ = meta_models[name]
    assert type(model).__name__ == stored_specs()[name].transformers_class


@pytest.mark.parametrize("name", sorted(META_SAMPLE))
def test_params_per_layer_matches_a_real_block(name, meta_models):
    model, _ = meta_models[name]
    block = model.get_submodule(META_SAMPLE[name])
    real = sum(p.numel() for p in block.parameters())
    spec = stored_specs()[name]
    # From the spec alone (model-type defaults) and from the config's own layout.
    assert params_per_layer(spec) == real
    assert params_per_layer(spec, parse_hf_config(entries()[name]["config"]).details) == real


def test_t5_v1_1_head_stays_untied_on_meta(meta_models):
    model, counts = meta_models["t0-3b"]
    assert model.get_output_embeddings().weight is not model.get_input_embeddings().weight
    assert counts.embedding == 2 * 32128 * 2048


# --- (b) published totals -------------------------------------------------------------------------

PUBLISHED_TOTALS = {
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-405b": 405_853_388_800,
    # Llama 3.2's model cards (1.23B, 3.21B), exactly: tied 128,256 x h embeddings; 16 / 28 blocks of
    # q and o (h x h), k and v (h x 8 kv heads x head_dim), a 3 x h x 8192 SwiGLU and two norms; a final norm.
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-0.5b": 494_032_768,
    "gemma-2-2b": 2_614_341_888,
    "gemma-2-9b": 9_241_705_984,
    "gemma-2-27b": 27_227_128_320,
    "phi-3-mini": 3_821_079_552,
    "falcon-7b": 6_921_720_704,
    "bloom-560m": 559_214_592,
    "bloom-176b": 176_247_271_424,
    "gpt-neox-20b": 20_554_567_680,
    # Pythia's README table.
    "pythia-160m": 162_322_944,
    "pythia-1.4b": 1_414_647_808,
    "pythia-6.9b": 6_857_302_016,
    "pythia-12b": 11_846_072_320,
    # BertModel / RobertaModel, pooler included: the 110M / 340M / 125M / 355M of the papers.
    "bert-base-uncased": 109_482_240,
    "bert-large-uncased": 335_141_888,
    "roberta-base": 124_645_632,
    "roberta-large": 355_359_744,
    "t5-small": 60_506_624,
    "t5-base": 222_903_552,
    "t5-large": 737_668_096,
    "t5-3b": 2_851_598_336,
    "t5-11b": 11_307_321_344,
}

# Rounded figures from model cards: (total, active per token).
PUBLISHED_MOE = {
    "mixtral-8x7b": (46.7e9, 12.9e9),
    "mixtral-8x22b": (141e9, 39e9),
    "qwen1.5-moe-a2.7b": (14.3e9, 2.7e9),
}


@pytest.mark.parametrize("name, published", sorted(PUBLISHED_TOTALS.items()))
def test_total_matches_published(name, published):
    assert stored_specs()[name].params.total == published


@pytest.mark.parametrize("name, published", sorted(PUBLISHED_MOE.items()))
def test_moe_total_and_active_match_model_cards(name, published):
    total, active = published
    params = stored_specs()[name].params
    assert params.total == pytest.approx(total, rel=0.01)
    assert params.active_per_token == pytest.approx(active, rel=0.02)


def test_t0_3b_matches_deepspeed_estimator():
    """DeepSpeed's docs estimate T0_3B from AutoModel (T5Model: no LM head): 2783M total, 65M largest layer."""
    from tests.reference_data import published_reference

    model = published_reference()["deepspeed_estimator_T0_3B"]["model"]
    params = stored_specs()["t0-3b"].params
    separate_head = 32128 * 2048
    assert f"{(params.total - separate_head) // 10**6}M" == model["total_params"]
    assert f"{params.largest_layer // 10**6}M" == model["largest_layer_params"]


def test_llama_2_7b_block_matches_accelerate_largest_layer():
    """accelerate estimate-memory prints 772.03 MB (fp32) as Llama-2-7B's largest layer: one decoder block."""
    assert params_per_layer(stored_specs()["llama-2-7b"]) * 4 / 2**20 == pytest.approx(772.03, abs=0.005)


# --- (c) the formula agrees with the meta-device count for every model ---------------------------


@pytest.mark.parametrize("name", ALL_MODELS)
def test_formula_total_equals_meta_device_total(name):
    formula = spec_from_hf_config(entries()[name]["config"], name=name).params
    assert formula.source == "formula"
    assert formula.total == stored_specs()[name].params.total


@pytest.mark.parametrize("name", ALL_MODELS)
def test_formula_breakdown_equals_meta_device_breakdown(name):
    formula = spec_from_hf_config(entries()[name]["config"], name=name).params
    stored = stored_specs()[name].params
    assert {f: getattr(formula, f) for f in COUNT_FIELDS} == {f: getattr(stored, f) for f in COUNT_FIELDS}


# Layout facts only a config carries: a spec alone (model-type defaults) misses them.
CONFIG_ONLY_LAYOUT = {"opt-350m": "word_embed_proj_dim: 512-wide embeddings with project_in/out"}


@pytest.mark.parametrize("name", ALL_MODELS)
def test_formula_from_spec_alone_equals_meta_device_total(name):
    """Counting from a stored spec, without its config, as the memory estimator does."""
    spec = stored_specs()[name]
    if name in CONFIG_ONLY_LAYOUT:
        pytest.skip(CONFIG_ONLY_LAYOUT[name])
    assert formula_param_counts(spec).total == spec.params.total


@pytest.mark.parametrize("name", ALL_MODELS)
def test_params_per_layer_from_spec_alone_equals_from_config(name):
    layout = parse_hf_config(entries()[name]["config"]).details
    assert params_per_layer(stored_specs()[name]) == params_per_layer(stored_specs()[name], layout)


# --- (d) stored specs are what the parser reads from the stored configs --------------------------


@pytest.mark.parametrize("name", ALL_MODELS)
def test_stored_spec_equals_parsed_config(name):
    entry = entries()[name]
    stored = stored_specs()[name]
    parsed = spec_from_hf_config(
        entry["config"], name=name, hf_id=entry["hf_id"], aliases=entry["aliases"], params=stored.params
    )
    assert parsed == stored


def test_catalog_and_config_parsing_need_neither_torch_nor_transformers():
    import subprocess
    import sys

    code = (
        "import sys; from planner.models.catalog import load_catalog; load_catalog(); "
        "import planner.models.hf_config, planner.models.param_formula, planner.models.param_count; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'heavy import'"
    )
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True)
