"""Config readers for encoders: BERT/RoBERTa (with or without a head), ViT, and the T5 and Whisper encoder-decoders.

Each reads the fields its model_type uses, under the spellings transformers
accepts, with its config class's defaults (planner/models/hf_config.py
dispatches to them through the model-family registry).
"""

from __future__ import annotations

from planner.models.config_fields import ConfigFields, basic_dims
from planner.models.param_details import ParameterDetails, whisper_details
from planner.models.parsed_config import ParsedConfig
from planner.models.spec import MlpKind, ModelArchitecture, ModelFamily


def _bare_encoder(config: dict) -> bool:
    """architectures names the base model (BertModel, RobertaModel): a sentence-embedding encoder with no head.
    Without architectures, or with a task head (BertForMaskedLM, ...), the encoder trains with its MLM head."""
    architectures = config.get("architectures") or []
    return bool(architectures) and all(name.endswith("Model") and "For" not in name for name in architectures)


def read_bert_style(f: ConfigFields, model_type: str) -> ParsedConfig:
    return ParsedConfig(
        dims=ModelArchitecture(
            family=ModelFamily.ENCODER_ONLY,
            model_type=model_type,
            **basic_dims(f),
            ffn_size=f.int("intermediate_size"),
            activation=f.str("hidden_act", default="gelu"),
            max_position_embeddings=f.int("max_position_embeddings", default=512),
            tied_embeddings=True,  # the base model has no output head to tie or untie
            attention_bias=True,
            mlp_bias=True,
            transformers_class="BertModel" if model_type == "bert" else "RobertaModel",
            output_head=not _bare_encoder(f.config),
            hidden_dropout=f.probability("hidden_dropout_prob", default=0.1),
            attention_dropout=f.probability("attention_probs_dropout_prob", default=0.1),
        ),
        details=ParameterDetails(
            token_type_vocab_size=f.int("type_vocab_size", default=2, minimum=0),
            embedding_norm=True,
            final_norms=0,
            pooler=True,
        ),
    )


def read_vit(f: ConfigFields) -> ParsedConfig:
    """ViT: the sequence is the image's patches plus a CLS token; `vocab_size` holds the classifier's labels."""
    hidden = f.int("hidden_size")
    image, patch = f.int("image_size", default=224), f.int("patch_size", default=16)
    if image % patch:
        raise f.error("patch_size", f"({patch}) does not divide image_size ({image})")
    channels = f.int("num_channels", default=3)
    labels = len(f.config["id2label"]) if isinstance(f.config.get("id2label"), dict) else f.int("num_labels", default=2)
    heads = f.int("num_attention_heads")
    base = {
        "hidden_size": hidden,
        "num_layers": f.int("num_hidden_layers"),
        "num_heads": heads,
        "head_dim": f.head_dim(hidden, heads, "num_attention_heads"),
        "vocab_size": labels,
    }
    return ParsedConfig(
        dims=ModelArchitecture(
            family=ModelFamily.ENCODER_ONLY,
            model_type="vit",
            **base,
            ffn_size=f.int("intermediate_size"),
            activation=f.str("hidden_act", default="gelu"),
            max_position_embeddings=(image // patch) ** 2 + 1,
            tied_embeddings=True,  # no token table to tie; the classifier is counted on its own
            attention_bias=bool(f.config.get("qkv_bias", True)),
            mlp_bias=True,
            patch_values=channels * patch * patch,
            transformers_class="ViTForImageClassification",
            output_head=False,  # logits for the CLS token only: labels per image, not per token
            hidden_dropout=f.probability("hidden_dropout_prob", default=0.0),
            attention_dropout=f.probability("attention_probs_dropout_prob", default=0.0),
        ),
        details=ParameterDetails(
            final_norms=1,
            patch_embedding_params=channels * patch * patch * hidden + hidden + hidden,  # conv + bias + CLS
            classifier_params=hidden * labels + labels,
        ),
    )


def read_t5(f: ConfigFields) -> ParsedConfig:
    feed_forward = f.str("feed_forward_proj", default="relu")
    parts = feed_forward.split("-")
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
        raise f.error(
            "feed_forward_proj", f"must be 'ACT' or 'gated-ACT' such as 'relu' or 'gated-gelu', got {feed_forward!r}"
        )
    encoder_layers = f.int("num_layers", "num_hidden_layers")
    decoder_layers = f.int("num_decoder_layers", default=encoder_layers)
    dropout = f.probability("dropout_rate", default=0.1)
    return ParsedConfig(
        dims=ModelArchitecture(
            family=ModelFamily.ENCODER_DECODER,
            model_type="t5",
            hidden_size=f.int("d_model", "hidden_size"),
            num_layers=encoder_layers + decoder_layers,
            num_encoder_layers=encoder_layers,
            num_decoder_layers=decoder_layers,
            num_heads=f.int("num_heads", "num_attention_heads"),
            # Attention width is heads x d_kv, which need not equal d_model (t5-3b, t5-11b).
            head_dim=f.int("d_kv", default=64),
            ffn_size=f.int("d_ff"),
            mlp_kind=MlpKind.GATED if len(parts) == 2 else MlpKind.STANDARD,
            # transformers runs T5 v1.1's 'gated-gelu' with the tanh-approximated gelu_new.
            activation="gelu_new" if feed_forward == "gated-gelu" else parts[-1],
            vocab_size=f.int("vocab_size"),
            # Relative positions have no table; n_positions is the length it was trained for.
            max_position_embeddings=f.int("n_positions", default=512),
            # T5 v1.1 and T0 keep a separate lm_head (tie_word_embeddings: false).
            tied_embeddings=f.bool("tie_word_embeddings", True),
            norm="rmsnorm",
            position_embedding="relative",
            transformers_class="T5ForConditionalGeneration",
            hidden_dropout=dropout,
            attention_dropout=dropout,
        ),
        details=ParameterDetails(
            final_norms=2, relative_attention_buckets=f.int("relative_attention_num_buckets", default=32)
        ),
    )


def _same_in_both_stacks(f: ConfigFields, encoder_field: str, decoder_field: str, default: int) -> int:
    """Whisper names the encoder's and the decoder's widths apart; every released checkpoint keeps them equal."""
    encoder, decoder = f.int(encoder_field, default=default), f.int(decoder_field, default=default)
    if encoder != decoder:
        raise f.error(decoder_field, f"({decoder}) differs from {encoder_field} ({encoder}); the planner models "
                      "one width for both stacks")  # fmt: skip
    return encoder


def read_whisper(f: ConfigFields) -> ParsedConfig:
    """Whisper: an audio encoder over max_source_positions frames (after two convolutions halve 2x that many
    mel frames) and a text decoder over max_target_positions tokens, cross-attending to every audio position."""
    hidden = f.int("d_model")
    heads = _same_in_both_stacks(f, "encoder_attention_heads", "decoder_attention_heads", 6)
    encoder_layers, decoder_layers = f.int("encoder_layers", default=4), f.int("decoder_layers", default=4)
    mel_bins = f.int("num_mel_bins", default=80)
    dropout = f.probability("dropout")
    return ParsedConfig(
        dims=ModelArchitecture(
            family=ModelFamily.ENCODER_DECODER,
            model_type="whisper",
            hidden_size=hidden,
            num_layers=encoder_layers + decoder_layers,
            num_encoder_layers=encoder_layers,
            num_decoder_layers=decoder_layers,
            num_heads=heads,
            head_dim=f.head_dim(hidden, heads, "encoder_attention_heads"),
            ffn_size=_same_in_both_stacks(f, "encoder_ffn_dim", "decoder_ffn_dim", 1536),
            activation=f.str("activation_function", default="gelu"),
            vocab_size=f.int("vocab_size", default=51865),
            max_position_embeddings=f.int("max_target_positions", default=448),
            tied_embeddings=f.bool("tie_word_embeddings", True),
            attention_bias=True,  # q, v and out carry biases; k_proj has none (ParameterDetails.key_bias)
            mlp_bias=True,
            mel_bins=mel_bins,
            encoder_seq_len=f.int("max_source_positions", default=1500),
            transformers_class="WhisperForConditionalGeneration",
            hidden_dropout=dropout,
            attention_dropout=f.probability("attention_dropout"),
        ),
        details=whisper_details(hidden, mel_bins),
    )


# One reader per config layout; the registry (planner/models/families.py) says which family uses which.
