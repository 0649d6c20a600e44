"""Config readers for multimodal models: LLaVA-style (a CLIP vision tower, a projector and an LLM).

A LLaVA config nests two configs: `vision_config` (a clip_vision_model) and
`text_config` (any Llama-style LLM of the registry). The LLM is the model the
planner's formulas describe; the tower rides along as `ModelSpec.vision_tower`,
and each image fills `image_tokens` positions of the LLM's sequence
(docs/models-and-hardware.md).
"""

from __future__ import annotations

from collections.abc import Callable

from planner.models.config_fields import ConfigFields
from planner.models.param_details import ParameterDetails
from planner.models.parsed_config import ParsedConfig
from planner.models.spec import ModelArchitecture, ModelFamily

# transformers' LlamaConfig defaults: published LLaVA configs (llava-hf/llava-1.5-7b-hf) leave them out.
LLAMA_TEXT_DEFAULTS = {
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}
# The tower transformers' LlavaConfig builds when its config has no vision_config (its sub_configs_defaults):
# CLIP ViT-L/14 at 336 pixels, not CLIPVisionConfig's own defaults.
LLAVA_VISION_DEFAULTS = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                         "num_attention_heads": 16, "image_size": 336, "patch_size": 14}  # fmt: skip
# transformers' CLIPVisionConfig defaults (ViT-B/32).
CLIP_VISION_DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                        "num_attention_heads": 12, "image_size": 224, "patch_size": 32, "num_channels": 3}  # fmt: skip


def read_clip_vision(f: ConfigFields) -> ParsedConfig:
    """CLIP's vision transformer: patches (a bias-free conv) plus a class token, pre- and post-LayerNorm."""
    config = {**CLIP_VISION_DEFAULTS, **{k: v for k, v in f.config.items() if v is not None}}
    f = ConfigFields(config, f.source)
    hidden, heads = f.int("hidden_size"), f.int("num_attention_heads")
    image, patch, channels = f.int("image_size"), f.int("patch_size"), f.int("num_channels")
    if image % patch:
        raise f.error("patch_size", f"({patch}) does not divide image_size ({image})")
    return ParsedConfig(
        dims=ModelArchitecture(
            family=ModelFamily.ENCODER_ONLY,
            model_type="clip_vision_model",
            hidden_size=hidden,
            num_layers=f.int("num_hidden_layers"),
            num_heads=heads,
            head_dim=f.head_dim(hidden, heads, "num_attention_heads"),
            ffn_size=f.int("intermediate_size"),
            activation=f.str("hidden_act", default="quick_gelu"),
            vocab_size=1,  # no token table: the patch projection stands in for it
            max_position_embeddings=(image // patch) ** 2 + 1,
            tied_embeddings=True,
            attention_bias=True,
            mlp_bias=True,
            patch_values=channels * patch * patch,
            transformers_class="CLIPVisionModel",
            attention_dropout=f.probability("attention_dropout"),
            output_head=False,
        ),
        details=ParameterDetails(
            final_norms=1,  # post_layernorm
            embedding_norm=True,  # pre_layrnorm
            patch_embedding_params=channels * patch * patch * hidden + hidden,  # conv (no bias) + class token
        ),
    )


def read_llava(f: ConfigFields, read_text: Callable[[ConfigFields, str], ParsedConfig]) -> ParsedConfig:
    """LLaVA: the LLM (read by its own family's reader) with a CLIP tower and a two-layer GELU projector."""
    text_config = f.config.get("text_config") or {}
    vision_config = f.config.get("vision_config") or LLAVA_VISION_DEFAULTS
    if not isinstance(text_config, dict) or not isinstance(vision_config, dict):
        raise f.error("text_config", "and vision_config must be JSON objects")
    text_type = text_config.get("model_type", "llama")
    if text_type != "llama" and text_type not in ("mistral", "qwen2"):
        raise f.error("text_config.model_type", f"{text_type!r} is not supported; LLaVA plans cover llama, mistral "
                      "and qwen2 language models")  # fmt: skip
    if vision_config.get("model_type", "clip_vision_model") != "clip_vision_model":
        raise f.error("vision_config.model_type", f"{vision_config['model_type']!r} is not supported; use a "
                      "clip_vision_model tower")  # fmt: skip
    defaults = LLAMA_TEXT_DEFAULTS if text_type == "llama" else {}
    text = read_text(ConfigFields({**defaults, **text_config}, f"{f.source} text_config"), text_type)
    tower = read_clip_vision(ConfigFields(vision_config, f"{f.source} vision_config"))
    strategy = f.str("vision_feature_select_strategy", default="default")
    if strategy not in ("default", "full"):
        raise f.error("vision_feature_select_strategy", f"must be 'default' or 'full', got {strategy!r}")
    patches = tower.dims.max_position_embeddings - 1
    image_tokens = patches if strategy == "default" else patches + 1  # "default" drops the class token
    text_hidden, tower_hidden = text.dims.hidden_size, tower.dims.hidden_size
    bias = f.bool("multimodal_projector_bias", True)
    # A list of feature layers is concatenated: the projector's input is that many towers wide (transformers'
    # LlavaMultiModalProjector; an audit's vision_feature_layer [-2, -5] was counted one wide).
    layers = f.config.get("vision_feature_layer", -2)
    if isinstance(layers, list) and (not layers or not all(type(layer) is int for layer in layers)):
        raise f.error("vision_feature_layer", "must be a layer index or a non-empty list of them")
    if not isinstance(layers, list) and type(layers) is not int:
        raise f.error("vision_feature_layer", "must be a layer index or a non-empty list of them")
    features = tower_hidden * (len(layers) if isinstance(layers, list) else 1)
    projector = features * text_hidden + text_hidden * text_hidden + (2 * text_hidden if bias else 0)
    if image_tokens >= text.dims.max_position_embeddings:
        raise f.error("vision_config", f"images of {image_tokens} tokens leave no room in the LLM's "
                      f"{text.dims.max_position_embeddings} positions")  # fmt: skip
    return text.model_copy(
        update={
            "dims": text.dims.model_copy(
                update={
                    "model_type": "llava",
                    "transformers_class": "LlavaForConditionalGeneration",
                    "image_tokens": image_tokens,
                    "projector_params": projector,
                }
            ),
            "vision_tower": tower,
        }
    )


# transformers' CLIPTextConfig defaults (the text tower of ViT-B/32).
CLIP_TEXT_DEFAULTS = {"hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 12,
                      "num_attention_heads": 8, "max_position_embeddings": 77, "vocab_size": 49408}  # fmt: skip


def read_clip(f: ConfigFields) -> ParsedConfig:
    """CLIP: a text transformer (causal mask, pooled at its end token) and a vision transformer (pooled at
    its class token), each projected to projection_dim, trained together on an in-batch contrastive loss.
    The text tower is what the formulas describe; the vision tower rides along as for LLaVA, with no
    image tokens in the text's sequence."""
    text_config, vision_config = f.config.get("text_config") or {}, f.config.get("vision_config") or {}
    if not isinstance(text_config, dict) or not isinstance(vision_config, dict):
        raise f.error("text_config", "and vision_config must be JSON objects")
    text = ConfigFields({**CLIP_TEXT_DEFAULTS, **{k: v for k, v in text_config.items() if v is not None}},
                        f"{f.source} text_config")  # fmt: skip
    tower = read_clip_vision(ConfigFields(vision_config, f"{f.source} vision_config"))
    hidden, heads = text.int("hidden_size"), text.int("num_attention_heads")
    projection = f.int("projection_dim", default=512)
    return ParsedConfig(
        dims=ModelArchitecture(
            family=ModelFamily.ENCODER_ONLY,
            model_type="clip",
            hidden_size=hidden,
            num_layers=text.int("num_hidden_layers"),
            num_heads=heads,
            head_dim=text.head_dim(hidden, heads, "num_attention_heads"),
            ffn_size=text.int("intermediate_size"),
            activation=text.str("hidden_act", default="quick_gelu"),
            vocab_size=text.int("vocab_size"),
            max_position_embeddings=text.int("max_position_embeddings"),
            tied_embeddings=True,  # no head over the vocabulary
            attention_bias=True,
            mlp_bias=True,
            transformers_class="CLIPModel",
            attention_dropout=text.probability("attention_dropout"),
            output_head=False,
            # Both projections (no bias) and the learned temperature.
            projector_params=(hidden + tower.dims.hidden_size) * projection + 1,
        ),
        details=ParameterDetails(final_norms=1),
        vision_tower=tower,
    )
