"""Reading HF config.json files: each model type's field names, defaults and quirks, and bad configs."""

from __future__ import annotations

import json

import pytest

from planner.errors import ConfigFieldError, UserInputError
from planner.models.catalog import CATALOG_DIR
from planner.models.hf_config import SUPPORTED_MODEL_TYPES, parse_hf_config, spec_from_hf_config
from planner.models.param_details import ParameterDetails
from planner.models.param_formula import formula_param_counts, params_per_layer
from planner.models.spec import MlpKind, ModelArchitecture, ModelFamily


def catalog_config(name: str) -> dict:
    return json.loads((CATALOG_DIR / "models" / f"{name}.json").read_text())["config"]


def spec(config: dict, **kwargs):
    return spec_from_hf_config(config, name="test-model", **kwargs)


LLAMA_7B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "intermediate_size": 11008,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}


# --- attention heads ----------------------------------------------------------------------------


def test_grouped_query_attention_kv_heads():
    llama3 = spec(catalog_config("llama-3-8b"))
    assert (llama3.num_heads, llama3.num_kv_heads, llama3.head_dim, llama3.kv_size) == (32, 8, 128, 1024)


def test_kv_heads_default_to_attention_heads_for_llama():
    assert spec(LLAMA_7B).num_kv_heads == 32


def test_mistral_kv_heads_default_to_eight_like_transformers():
    config = {**LLAMA_7B, "model_type": "mistral", "intermediate_size": 14336}
    assert spec(config).num_kv_heads == 8


def test_explicit_head_dim_may_differ_from_hidden_over_heads():
    gemma = spec(catalog_config("gemma-2-9b"))
    assert (gemma.hidden_size, gemma.num_heads, gemma.head_dim) == (3584, 16, 256)


def test_t5_attention_width_is_heads_times_d_kv():
    t5_11b = spec(catalog_config("t5-11b"))
    assert (t5_11b.hidden_size, t5_11b.num_heads, t5_11b.head_dim) == (1024, 128, 128)


# --- Falcon variants -----------------------------------------------------------------------------


def test_falcon_7b_is_multi_query_with_one_shared_norm():
    parsed = parse_hf_config(catalog_config("falcon-7b"))
    assert parsed.dims.num_kv_heads == 1
    assert parsed.dims.parallel_attention_mlp
    assert parsed.details.norms_per_layer == 1


def test_falcon_new_decoder_architecture_groups_kv_heads_with_two_norms():
    parsed = parse_hf_config(catalog_config("falcon-40b"))
    assert (parsed.dims.num_heads, parsed.dims.num_kv_heads, parsed.dims.head_dim) == (128, 8, 64)
    assert parsed.details.norms_per_layer == 2


def test_falcon_without_multi_query_has_a_kv_head_per_head_and_alibi():
    config = {
        "model_type": "falcon",
        "hidden_size": 2048,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "vocab_size": 50304,
        "multi_query": False,
        "parallel_attn": False,
        "alibi": True,
        "bias": True,
    }
    parsed = parse_hf_config(config)
    assert parsed.dims.num_kv_heads == 32
    assert parsed.dims.position_embedding == "alibi"
    assert parsed.details.norms_per_layer == 2  # sequential attention then MLP, each with its norm
    assert parsed.dims.attention_bias and parsed.dims.mlp_bias


# --- MLP kinds -------------------------------------------------------------------------------------


def test_t5_v1_1_gated_gelu_is_a_gated_mlp():
    t0 = spec(catalog_config("t0-3b"))
    assert t0.mlp_kind is MlpKind.GATED
    assert t0.activation == "gelu_new"  # what transformers runs for 'gated-gelu'
    assert t0.family is ModelFamily.ENCODER_DECODER
    assert (t0.num_encoder_layers, t0.num_decoder_layers, t0.num_layers) == (24, 24, 48)


def test_t5_v1_0_relu_is_a_standard_mlp():
    t5 = spec(catalog_config("t5-small"))
    assert (t5.mlp_kind, t5.activation) == (MlpKind.STANDARD, "relu")


def test_llama_style_models_are_gated_rmsnorm_rotary():
    llama = spec(LLAMA_7B)
    assert (llama.mlp_kind, llama.norm, llama.position_embedding) == (MlpKind.GATED, "rmsnorm", "rotary")


def test_mixtral_experts():
    mixtral = spec(catalog_config("mixtral-8x7b"))
    assert (mixtral.num_experts, mixtral.experts_per_token, mixtral.expert_ffn_size) == (8, 2, 14336)
    assert mixtral.is_moe


# --- tied embeddings: each model type has its own default ----------------------------------------


@pytest.mark.parametrize(
    "config, tied",
    [
        ({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257}, True),
        (LLAMA_7B, False),
        ({**LLAMA_7B, "model_type": "gemma", "head_dim": 128}, True),
        ({**LLAMA_7B, "model_type": "qwen2"}, False),
        ({**LLAMA_7B, "model_type": "qwen2", "tie_word_embeddings": True}, True),
        (
            {
                "model_type": "gpt_neox",
                "hidden_size": 512,
                "num_hidden_layers": 6,
                "num_attention_heads": 8,
                "intermediate_size": 2048,
                "vocab_size": 50304,
            },
            False,
        ),
        (
            {
                "model_type": "opt",
                "hidden_size": 768,
                "num_hidden_layers": 12,
                "num_attention_heads": 12,
                "ffn_dim": 3072,
                "vocab_size": 50272,
            },
            True,
        ),
        (
            {"model_type": "t5", "d_model": 512, "num_layers": 6, "num_heads": 8, "d_ff": 2048, "vocab_size": 32128},
            True,
        ),
    ],
)
def test_tie_word_embeddings_defaults(config, tied):
    assert spec(config).tied_embeddings is tied


def test_t0_keeps_its_untied_head():
    assert spec(catalog_config("t0-3b")).tied_embeddings is False


# --- layout details read from the config -----------------------------------------------------------


def test_opt_350m_projection_and_post_norm():
    layout = parse_hf_config(catalog_config("opt-350m")).details
    assert (layout.embedding_projection_dim, layout.final_norms, layout.position_offset) == (512, 0, 2)


def test_roberta_reads_its_single_token_type():
    assert parse_hf_config(catalog_config("roberta-base")).details.token_type_vocab_size == 1
    assert parse_hf_config(catalog_config("bert-base-uncased")).details.token_type_vocab_size == 2


def test_bloom_accepts_the_legacy_n_embed_spelling():
    assert spec(catalog_config("bloom-560m")).hidden_size == 1024


def test_dropouts_are_read():
    gpt2 = spec(catalog_config("gpt2"))
    assert (gpt2.hidden_dropout, gpt2.attention_dropout) == (0.1, 0.1)
    assert spec(catalog_config("llama-2-7b")).hidden_dropout == 0.0


def test_without_counts_the_formula_fills_them_in():
    counts = spec(catalog_config("llama-2-7b")).params
    assert (counts.source, counts.total) == ("formula", 6_738_415_616)


def test_given_counts_are_kept():
    counts = formula_param_counts(parse_hf_config(LLAMA_7B).dims)
    assert spec(LLAMA_7B, params=counts).params is counts


# --- malformed configs name the field --------------------------------------------------------------


def test_missing_field_is_named():
    config = {key: value for key, value in LLAMA_7B.items() if key != "num_attention_heads"}
    with pytest.raises(ConfigFieldError, match=r"^config\.json: field 'num_attention_heads' is missing$"):
        spec(config)


def test_missing_field_lists_accepted_spellings():
    with pytest.raises(ConfigFieldError, match=r"field 'n_embd' is missing \(also accepted: hidden_size\)"):
        spec({"model_type": "gpt2", "n_layer": 12, "n_head": 12, "vocab_size": 50257})


def test_source_names_the_file():
    with pytest.raises(ConfigFieldError, match=r"^/models/x/config\.json: field 'hidden_size'"):
        spec({**LLAMA_7B, "hidden_size": None}, source="/models/x/config.json")


@pytest.mark.parametrize(
    "field, value, problem",
    [
        ("hidden_size", "4096", "must be an integer, got '4096'"),
        ("hidden_size", 4096.0, "must be an integer"),
        ("num_hidden_layers", True, "must be an integer, got True"),
        ("num_hidden_layers", 0, "must be positive, got 0"),
        ("vocab_size", -5, "must be positive"),
        ("tie_word_embeddings", "yes", "must be true or false"),
        ("attention_dropout", 1.5, "must be a probability"),
    ],
)
def test_wrong_values_are_named(field, value, problem):
    with pytest.raises(ConfigFieldError) as caught:
        spec({**LLAMA_7B, field: value})
    assert caught.value.field == field
    assert problem in str(caught.value)


def test_heads_not_dividing_hidden_is_an_error_on_the_heads_field():
    with pytest.raises(ConfigFieldError, match=r"field 'num_attention_heads' \(30\) does not divide the hidden size"):
        spec({**LLAMA_7B, "num_attention_heads": 30})


def test_gpt2_heads_error_uses_the_configs_own_spelling():
    with pytest.raises(ConfigFieldError, match=r"field 'n_head'"):
        spec({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 7, "vocab_size": 50257})


def test_kv_heads_must_divide_heads():
    with pytest.raises(ConfigFieldError, match=r"field 'num_key_value_heads' \(5\) must divide"):
        spec({**LLAMA_7B, "num_key_value_heads": 5})


def test_bad_t5_feed_forward_proj():
    config = {**catalog_config("t5-small"), "feed_forward_proj": "fancy-gelu"}
    with pytest.raises(ConfigFieldError, match=r"field 'feed_forward_proj'"):
        spec(config)


def test_moe_top_k_above_expert_count():
    with pytest.raises(ConfigFieldError, match=r"field 'num_experts_per_tok'"):
        spec({**catalog_config("mixtral-8x7b"), "num_experts_per_tok": 9})


def test_unknown_model_type_lists_supported_types():
    with pytest.raises(
        UserInputError, match=r"model_type 'mamba' is not supported; supported types: .*llama"
    ) as caught:
        spec({**LLAMA_7B, "model_type": "mamba"})
    assert not isinstance(caught.value, ConfigFieldError)


def test_missing_model_type_is_a_field_error():
    config = {key: value for key, value in LLAMA_7B.items() if key != "model_type"}
    with pytest.raises(ConfigFieldError, match=r"field 'model_type' is missing"):
        spec(config)


def test_not_a_json_object():
    with pytest.raises(UserInputError, match="expected a JSON object"):
        spec([1, 2, 3])  # type: ignore[arg-type]


def test_required_model_types_are_supported():
    required = {
        "gpt2",
        "opt",
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "gemma",
        "gemma2",
        "phi3",
        "falcon",
        "bloom",
        "gpt_neox",
        "bert",
        "roberta",
        "t5",
    }
    assert required <= set(SUPPORTED_MODEL_TYPES)


# --- the formula from explicit dimensions ----------------------------------------------------------


def test_model_architecture_fills_kv_heads_and_head_dim():
    dims = ModelArchitecture(hidden_size=4096, num_layers=32, num_heads=32, ffn_size=11008, vocab_size=32000)
    assert (dims.num_kv_heads, dims.head_dim) == (32, 128)


def test_model_architecture_rejects_heads_not_dividing_hidden():
    with pytest.raises(ValueError, match="not a multiple"):
        ModelArchitecture(hidden_size=100, num_layers=2, num_heads=3, ffn_size=400, vocab_size=10)


def test_formula_from_explicit_llama_dimensions():
    dims = ModelArchitecture(
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        ffn_size=11008,
        vocab_size=32000,
        mlp_kind="gated",
        norm="rmsnorm",
        position_embedding="rotary",
        tied_embeddings=False,
    )
    counts = formula_param_counts(dims)
    assert counts.total == 6_738_415_616
    assert counts.embedding == 2 * 32000 * 4096
    assert params_per_layer(dims) == 202_383_360


def test_model_spec_is_the_architecture_plus_its_counts():
    """Each architecture field is declared once: ModelSpec adds only the counts and where they came from,
    and keeps the architecture's field order (the order plan.json shows)."""
    from planner.models.spec import ModelSpec

    assert list(ModelSpec.model_fields) == [*ModelArchitecture.model_fields, "params", "origin"]


def test_layout_defaults_are_a_plain_decoder():
    layout = ParameterDetails()
    assert (layout.norms_per_layer, layout.final_norms, layout.position_offset) == (2, 1, 0)


LLAMA_SMALL = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256,
               "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000,
               "max_position_embeddings": 512, "rms_norm_eps": 1e-5}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (json.dumps({**LLAMA_SMALL, "architectures": []}), "field 'architectures' must be a list of class names"),
        (json.dumps({**LLAMA_SMALL, "architectures": ["FooForBar"]}), "['FooForBar'] names no llama class"),
        (json.dumps(LLAMA_SMALL).replace("1e-05", "NaN"), "rms_norm_eps is nan, not a finite number"),
        (json.dumps({**LLAMA_SMALL, "head_dim": 63}), "field 'head_dim' is 63; rotary positions need an even"),
        (json.dumps({**LLAMA_SMALL, "rope_scaling": "yes"}), "field 'rope_scaling' must be null or a block"),
        (json.dumps(LLAMA_SMALL)[:-1] + ', "hidden_size": 512}', "key 'hidden_size' is given twice"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_a_config_json_with_nonsense_is_one_line_naming_the_key(tmp_path, text, message):
    from planner.models.resolve import spec_from_config_path

    (tmp_path / "config.json").write_text(text)
    with pytest.raises(UserInputError) as refused:
        spec_from_config_path(tmp_path, exact_counts=False)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_sound_small_config_still_reads():
    spec = spec_from_hf_config(LLAMA_SMALL, name="small")
    assert (spec.hidden_size, spec.head_dim) == (256, 64)


def test_a_model_name_longer_than_any_path_is_one_line():
    from planner.models.resolve import resolve_model

    with pytest.raises(UserInputError, match="--model is 20,000 characters long"):
        resolve_model("a" * 20_000)


@pytest.mark.parametrize(
    ("outer", "inner"), [("gemma3", "gemma3_text"), ("llama4", "llama4_text"), ("mistral3", "mistral")]
)
def test_a_multimodal_wrapper_names_the_language_model_it_could_plan(outer, inner):
    """An audit: Gemma 3, Llama 4 and Mistral Small 3.1's official configs got the supported-types list only,
    where their text_config is a supported type: the line says so and what to do."""
    text = {**LLAMA_7B, "model_type": inner}
    with pytest.raises(
        UserInputError, match=rf"model_type '{outer}' wraps a vision tower .* model_type '{inner}'\) is: save"
    ):
        spec({"model_type": outer, "text_config": text, "vision_config": {}})
