"""Names the tool this project replaces accepted, mapped to catalog models and model families.

LLaMA-1 7B/13B share their architecture (dimensions, vocabulary) with Llama-2
7B/13B; only the context length differs (2048 vs 4096), which the planner's
--seq-len sets anyway, so the Llama-2 configs stand in for them.
"""

from __future__ import annotations

from planner.errors import UserInputError
from planner.models.spec import ModelFamily

LEGACY_MODEL_NAMES = {
    "llama-7b": "llama-2-7b",
    "llama-13b": "llama-2-13b",
    "llama7b": "llama-2-7b",
    "llama13b": "llama-2-13b",
    "gpt-j": "gpt-j-6b",
    "gptj": "gpt-j-6b",
    "gpt-neox": "gpt-neox-20b",
    "mistral": "mistral-7b",
    "mixtral": "mixtral-8x7b",
}

# The seed tool's --model-family values and the architecture family each implies.
LEGACY_MODEL_FAMILIES: dict[str, tuple[ModelFamily, ...]] = {
    "text_generation": (ModelFamily.DECODER_ONLY, ModelFamily.ENCODER_DECODER),
    "causal_lm": (ModelFamily.DECODER_ONLY,),
    "text_classification": (ModelFamily.ENCODER_ONLY, ModelFamily.DECODER_ONLY),
    "token_classification": (ModelFamily.ENCODER_ONLY,),
    "question_answering": (ModelFamily.ENCODER_ONLY, ModelFamily.ENCODER_DECODER),
    "fill_mask": (ModelFamily.ENCODER_ONLY,),
    "text_embedding": (ModelFamily.ENCODER_ONLY,),  # BERT/RoBERTa-style sentence encoders
    "vision": (ModelFamily.ENCODER_ONLY,),  # ViT: an encoder over image patches
    "image_classification": (ModelFamily.ENCODER_ONLY,),
    "seq2seq": (ModelFamily.ENCODER_DECODER,),
    "translation": (ModelFamily.ENCODER_DECODER,),
    "summarization": (ModelFamily.ENCODER_DECODER, ModelFamily.DECODER_ONLY),
    "audio": (ModelFamily.ENCODER_DECODER,),  # Whisper: an audio encoder and a text decoder
    "speech_recognition": (ModelFamily.ENCODER_DECODER,),
    "automatic_speech_recognition": (ModelFamily.ENCODER_DECODER,),
    "multimodal": (ModelFamily.DECODER_ONLY, ModelFamily.ENCODER_ONLY),  # LLaVA-style, and CLIP
    "image_text_to_text": (ModelFamily.DECODER_ONLY,),
}


# What each family's models read (ModelSpec.modality); families not listed read text.
FAMILY_MODALITY = {
    "vision": "image",
    "image_classification": "image",
    "audio": "audio",
    "speech_recognition": "audio",
    "automatic_speech_recognition": "audio",
    "multimodal": "image-text",
    "image_text_to_text": "image-text",
}


def family_modality(model_family: str) -> str:
    return FAMILY_MODALITY.get(family_key(model_family), "text")


def catalog_name(name: str) -> str:
    """The catalog name for a legacy model name; other names pass through unchanged."""
    return LEGACY_MODEL_NAMES.get(name.strip().lower(), name)


def family_key(model_family: str) -> str:
    return model_family.strip().lower().replace("-", "_")


def check_model_family(model_family: str) -> tuple[ModelFamily, ...]:
    key = family_key(model_family)
    families = LEGACY_MODEL_FAMILIES.get(key)
    if families is None:
        raise UserInputError(f"unknown model family '{model_family}'; use one of {', '.join(LEGACY_MODEL_FAMILIES)}")
    return families
