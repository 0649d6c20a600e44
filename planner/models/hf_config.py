"""Read a Hugging Face config.json into a ModelSpec, without torch or transformers.

Every supported model_type names its dimensions differently (n_embd, hidden_size,
d_model...) and has its own defaults for fields a config may leave out (Llama
unties its embeddings by default, GPT-2 and Gemma tie them). The readers below
mirror the transformers config classes and modules closely enough that the
formula counts they lead to equal the meta-device counts for the catalog.

A config that cannot describe a model -- a missing dimension, a string where a
number belongs, heads that do not divide the hidden size -- raises
ConfigFieldError naming the field; an unknown model_type raises UserInputError
listing the supported ones.

    spec_from_hf_config(config, name=...)  -> ModelSpec (formula counts unless params= is given)
    parse_hf_config(config)                -> ParsedConfig: dims, parameter details, transformers class
    SUPPORTED_MODEL_TYPES
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from planner.errors import ConfigFieldError, UserInputError
from planner.models.attention_window import attention_window
from planner.models.config_fields import ConfigFields, basic_dims
from planner.models.deepseek_config import read_deepseek
from planner.models.encoder_configs import read_bert_style, read_t5, read_vit, read_whisper
from planner.models.families import FAMILIES
from planner.models.moe_config import read_moe
from planner.models.mpt_config import read_mpt
from planner.models.multimodal_configs import read_clip, read_llava
from planner.models.param_details import ParameterDetails
from planner.models.param_formula import formula_param_counts, with_vision_tower
from planner.models.parsed_config import ParsedConfig
from planner.models.spec import MlpKind, ModelArchitecture, ModelSpec, ParamCounts

# --- GPT-2 lineage: LayerNorm with biases, learned or rotary positions ---------------------------

_GPT2_NAMES = dict(
    hidden=("n_embd", "hidden_size"), layers=("n_layer", "num_hidden_layers"), heads=("n_head", "num_attention_heads")
)


def _read_gpt2_style(f: ConfigFields, model_type: str) -> ParsedConfig:
    """GPT-2 and GPT-J share field names; GPT-J adds rotary positions and parallel attention/MLP."""
    dims = basic_dims(f, **_GPT2_NAMES)
    gptj = model_type == "gptj"
    return ParsedConfig(
        dims=ModelArchitecture(
            model_type=model_type,
            **dims,
            ffn_size=f.int("n_inner", default=4 * dims["hidden_size"]),
            activation=f.str("activation_function", default="gelu_new"),
            max_position_embeddings=f.int("n_positions", "max_position_embeddings", default=2048 if gptj else 1024),
            tied_embeddings=f.bool("tie_word_embeddings", not gptj),
            position_embedding="rotary" if gptj else "learned",
            attention_bias=not gptj,
            mlp_bias=True,
            parallel_attention_mlp=gptj,
            transformers_class="GPTJForCausalLM" if gptj else "GPT2LMHeadModel",
            hidden_dropout=f.probability("resid_pdrop", default=0.0 if gptj else 0.1),
            attention_dropout=f.probability("attn_pdrop", default=0.0 if gptj else 0.1),
        ),
        # GPT-J: one shared norm feeds attention and MLP, and its untied lm_head has a bias.
        details=ParameterDetails(norms_per_layer=1, lm_head_bias=True) if gptj else ParameterDetails(fused_qkv=True),
    )


def _read_opt(f: ConfigFields) -> ParsedConfig:
    dims = basic_dims(f)
    bias = f.bool("enable_bias", True)
    projection = f.int("word_embed_proj_dim", default=dims["hidden_size"])
    # Post-norm OPT (350m) has no final layer norm.
    final_norm = f.bool("do_layer_norm_before", True) and not f.bool("_remove_final_layer_norm", False)
    return ParsedConfig(
        dims=ModelArchitecture(
            model_type="opt",
            **dims,
            ffn_size=f.int("ffn_dim"),
            activation=f.str("activation_function", default="relu"),
            max_position_embeddings=f.int("max_position_embeddings", default=2048),
            tied_embeddings=f.bool("tie_word_embeddings", True),
            attention_bias=bias,
            mlp_bias=bias,
            transformers_class="OPTForCausalLM",
            hidden_dropout=f.probability("dropout", default=0.1),
            attention_dropout=f.probability("attention_dropout"),
        ),
        details=ParameterDetails(
            position_offset=2,
            embedding_projection_dim=0 if projection == dims["hidden_size"] else projection,
            final_norms=1 if final_norm else 0,
        ),
    )


def _read_bloom(f: ConfigFields) -> ParsedConfig:
    dims = basic_dims(
        f,
        hidden=("hidden_size", "n_embed"),
        layers=("n_layer", "num_hidden_layers"),
        heads=("n_head", "num_attention_heads"),
    )
    return ParsedConfig(
        dims=ModelArchitecture(
            model_type="bloom",
            **dims,
            ffn_size=4 * dims["hidden_size"],
            activation="bloom_gelu",
            # ALiBi has no position table; seq_length is the training context.
            max_position_embeddings=f.int("seq_length", default=2048),
            tied_embeddings=f.bool("tie_word_embeddings", True),
            position_embedding="alibi",
            attention_bias=True,
            mlp_bias=True,
            transformers_class="BloomForCausalLM",
            hidden_dropout=f.probability("hidden_dropout"),
            attention_dropout=f.probability("attention_dropout"),
        ),
        details=ParameterDetails(fused_qkv=True, embedding_norm=True),
    )


def _read_falcon(f: ConfigFields) -> ParsedConfig:
    dims = basic_dims(f, hidden=("hidden_size", "n_embed"))
    heads = dims["num_heads"]
    new_architecture = f.bool("new_decoder_architecture", False)
    multi_query, parallel = f.bool("multi_query", True), f.bool("parallel_attn", True)
    # Falcon-40B/180B (the "new decoder architecture") group kv heads; 7B shares one (multi-query).
    if new_architecture:
        kv_heads = f.kv_heads(heads, None, "num_kv_heads")
    else:
        kv_heads = 1 if multi_query else heads
    norms_in_parallel = f.int("num_ln_in_parallel_attn", default=2 if new_architecture else 1)
    bias = f.bool("bias", False)
    return ParsedConfig(
        dims=ModelArchitecture(
            model_type="falcon",
            **dims,
            num_kv_heads=kv_heads,
            ffn_size=f.int("ffn_hidden_size", default=4 * dims["hidden_size"]),
            activation=f.str("activation", default="gelu"),
            max_position_embeddings=f.int("max_position_embeddings", default=2048),
            tied_embeddings=f.bool("tie_word_embeddings", True),
            position_embedding="alibi" if f.bool("alibi", False) else "rotary",
            attention_bias=bias,
            mlp_bias=bias,
            parallel_attention_mlp=parallel,
            transformers_class="FalconForCausalLM",
            hidden_dropout=f.probability("hidden_dropout"),
            attention_dropout=f.probability("attention_dropout"),
        ),
        details=ParameterDetails(fused_qkv=True, norms_per_layer=2 if not parallel or norms_in_parallel == 2 else 1),
    )


def _read_gpt_neox(f: ConfigFields) -> ParsedConfig:
    return ParsedConfig(
        dims=ModelArchitecture(
            model_type="gpt_neox",
            **basic_dims(f),
            ffn_size=f.int("intermediate_size"),
            activation=f.str("hidden_act", default="gelu"),
            max_position_embeddings=f.int("max_position_embeddings", default=2048),
            tied_embeddings=f.bool("tie_word_embeddings", False),
            position_embedding="rotary",
            attention_bias=f.bool("attention_bias", True),
            mlp_bias=True,
            parallel_attention_mlp=f.bool("use_parallel_residual", True),
            transformers_class="GPTNeoXForCausalLM",
            hidden_dropout=f.probability("hidden_dropout", "hidden_dropout_prob"),
            attention_dropout=f.probability("attention_dropout", "attention_probs_dropout_prob"),
        ),
        details=ParameterDetails(fused_qkv=True),
    )


# --- Llama-style decoders: RMSNorm, rotary, gated MLP, grouped kv heads --------------------------


def _read_llama_style(f: ConfigFields, model_type: str) -> ParsedConfig:
    entry = FAMILIES[model_type]
    style = entry.llama_style
    assert style is not None, model_type
    hidden, heads, layers = f.int("hidden_size"), f.int("num_attention_heads"), f.int("num_hidden_layers")
    kv_heads = f.kv_heads(heads, style.default_kv_heads, "num_key_value_heads")
    if f.config.get("head_dim") is not None or style.default_head_dim:
        head_dim = f.int("head_dim", default=style.default_head_dim)  # may differ from hidden // heads (Gemma)
    else:
        head_dim = f.head_dim(hidden, heads, "num_attention_heads")
    qkv_bias = {
        "attention_bias": lambda: f.bool("attention_bias", style.bias_by_default),
        "qkv_bias": lambda: f.bool("qkv_bias", True),
        "qkv": lambda: True,
        "none": lambda: False,
    }[style.bias]()
    moe_dims, moe_details, ffn = read_moe(f, model_type, layers)
    gemma = model_type.startswith("gemma")
    return ParsedConfig(
        dims=ModelArchitecture(
            model_type=model_type,
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            ffn_size=ffn,
            mlp_kind=MlpKind.GATED,
            activation=f.str("hidden_activation", "hidden_act", default="gelu_pytorch_tanh" if gemma else "silu"),
            vocab_size=f.int("vocab_size"),
            max_position_embeddings=f.int("max_position_embeddings", default=style.default_positions),
            tied_embeddings=f.bool("tie_word_embeddings", style.tied_by_default),
            norm="rmsnorm",
            position_embedding="rotary",
            attention_bias=qkv_bias,
            mlp_bias=model_type == "llama" and f.bool("mlp_bias", False),
            qk_l2_norm=model_type == "llama4_text" and f.bool("use_qk_norm", True),
            **moe_dims,
            transformers_class=style.transformers_class,
            hidden_dropout=f.probability("resid_pdrop") if model_type == "phi3" else 0.0,
            attention_dropout=f.probability("attention_dropout"),
        ),
        details=ParameterDetails(
            norms_per_layer=style.norms_per_layer,
            qk_norm=entry.traits.qk_norm,
            attention_output_bias=qkv_bias and style.bias == "attention_bias",
            fused_qkv=model_type == "phi3",
            fused_gate_up=model_type == "phi3",
            **moe_details,
        ),
    )


# --- encoders and encoder-decoders -------------------------------------------------------------


_READER_FUNCTIONS: dict[str, Callable[[ConfigFields, str], ParsedConfig]] = {
    "gpt2": _read_gpt2_style,
    "opt": lambda f, model_type: _read_opt(f),
    "bloom": lambda f, model_type: _read_bloom(f),
    "falcon": lambda f, model_type: _read_falcon(f),
    "gpt_neox": lambda f, model_type: _read_gpt_neox(f),
    "mpt": read_mpt,
    "llama": _read_llama_style,
    "bert": read_bert_style,
    "t5": lambda f, model_type: read_t5(f),
    "vit": lambda f, model_type: read_vit(f),
    "whisper": lambda f, model_type: read_whisper(f),
    "llava": lambda f, model_type: read_llava(f, _read_text_model),
    "clip": lambda f, model_type: read_clip(f),
    "deepseek": read_deepseek,
}


def _read_text_model(fields: ConfigFields, model_type: str) -> ParsedConfig:
    """A multimodal model's LLM, read by its own family's reader."""
    return _READER_FUNCTIONS[FAMILIES[model_type].reader](fields, model_type)


def _reader_for(model_type: str) -> Callable[[ConfigFields], ParsedConfig]:
    read = _READER_FUNCTIONS[FAMILIES[model_type].reader]
    return lambda fields: read(fields, model_type)


_READERS: dict[str, Callable[[ConfigFields], ParsedConfig]] = {
    model_type: _reader_for(model_type) for model_type in FAMILIES
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(_READERS))


def parse_hf_config(config: dict, *, source: str = "config.json") -> ParsedConfig:
    """Architecture, parameter details and transformers class a config.json describes."""
    if not isinstance(config, dict):
        raise UserInputError(f"{source}: expected a JSON object of config fields, got {type(config).__name__}")
    model_type = config.get("model_type")
    if model_type is None:
        raise ConfigFieldError(source, "model_type", f"is missing (supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    reader = _READERS.get(model_type) if isinstance(model_type, str) else None
    text = config.get("text_config")
    inner = text.get("model_type") if isinstance(text, dict) else None
    if reader is None and isinstance(inner, str) and inner in _READERS:  # Gemma 3, Llama 4, Mistral 3 (an audit)
        raise UserInputError(
            f"{source}: model_type {model_type!r} wraps a vision tower around its language model, which is not "
            f"planned; the language model (text_config, model_type {inner!r}) is: save text_config alone as a "
            "config.json and plan that (the tower's parameters are left out)"
        )
    if reader is None:
        raise UserInputError(
            f"{source}: model_type {model_type!r} is not supported; supported types: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)} (or describe the model with --params or the dimension flags)"
        )
    parsed = reader(ConfigFields(config, source))
    _check_sound(config, parsed, source)
    return parsed


def _family_prefix(transformers_class: str) -> str:
    """ "Llama" of LlamaForCausalLM, "GPT2" of GPT2LMHeadModel: what every class of the family starts with."""
    return re.split(r"For|Model|LMHead", transformers_class, maxsplit=1)[0].lower()


def _check_sound(config: dict, parsed: ParsedConfig, source: str) -> None:
    """Fields every family shares that a config can get wrong without any reader noticing: architectures that
    name no class of this model type, a rotary head of odd width, a rope_scaling that is not a settings block."""
    architectures = config.get("architectures")
    if architectures is not None:
        if (
            not isinstance(architectures, list)
            or not architectures
            or not all(isinstance(a, str) for a in architectures)
        ):
            raise ConfigFieldError(source, "architectures", f"must be a list of class names, not {architectures!r}")
        prefix = _family_prefix(parsed.dims.transformers_class)
        if prefix and not any(name.lower().startswith(prefix) for name in architectures):
            raise ConfigFieldError(
                source,
                "architectures",
                f"{architectures} names no {config['model_type']} class (e.g. {parsed.dims.transformers_class}); "
                "fix it, or the model_type",
            )
    dims = parsed.dims
    if dims.position_embedding == "rotary" and not dims.kv_lora_rank and dims.head_dim % 2:
        raise ConfigFieldError(source, "head_dim", f"is {dims.head_dim}; rotary positions need an even head width")
    rope = config.get("rope_scaling")
    if rope is not None and not (isinstance(rope, dict) and isinstance(rope.get("rope_type", rope.get("type")), str)):
        raise ConfigFieldError(
            source,
            "rope_scaling",
            f'must be null or a block with a rope_type (e.g. {{"rope_type": "llama3", ...}}), not {rope!r}',
        )


def spec_from_hf_config(
    config: dict,
    *,
    name: str,
    hf_id: str | None = None,
    aliases: Sequence[str] = (),
    origin: str = "catalog",
    params: ParamCounts | None = None,
    source: str = "config.json",
) -> ModelSpec:
    """The ModelSpec a config.json describes.

    params: exact counts (the catalog passes meta-device counts); without them
    the counts come from param_formula, labelled source="formula".
    """
    parsed = parse_hf_config(config, source=source)
    window, windowed, chunked = attention_window(config, parsed.dims.num_layers)
    if windowed:
        window_fields = {"attention_window": window, "windowed_layers": windowed, "chunked_attention": chunked}
        dims = parsed.dims.model_copy(update=window_fields)
        parsed = parsed.model_copy(update={"dims": dims})
    tower = None
    if parsed.vision_tower is not None:
        tower = _spec_of(parsed.vision_tower, name=f"{name} vision tower", origin=origin, params=None)
    if params is None:
        params = formula_param_counts(parsed.dims, parsed.details)
        if tower is not None:
            params = with_vision_tower(params, tower.params, parsed.dims.projector_params, parsed.dims.hidden_size)
    return _spec_of(parsed, name=name, hf_id=hf_id, aliases=aliases, origin=origin, params=params, tower=tower)


def _spec_of(
    parsed: ParsedConfig,
    *,
    name: str,
    origin: str,
    params: ParamCounts | None,
    hf_id: str | None = None,
    aliases: Sequence[str] = (),
    tower: ModelSpec | None = None,
) -> ModelSpec:
    named = {"name": name, "hf_id": hf_id, "aliases": tuple(aliases), "origin": origin, "vision_tower": tower}
    counts = params or formula_param_counts(parsed.dims, parsed.details)
    return ModelSpec(**{**parsed.dims.model_dump(), **named, "params": counts})
