"""What a traced model is: its transformers class, the batch it is fed and the loss its step trains on.

Causal and masked LMs and T5 train on their own loss over the tokens; a bare
encoder (sentence embeddings) on an in-batch contrastive loss; ViT on
image classification, its sequence fixed by the image; LLaVA on one image and its caption
per sequence (the image's tokens are part of seq_len); CLIP on image-caption pairs; Whisper on transcription, its
encoder over 30 s of mel frames and its decoder over seq_len tokens (benchmarks/memory/memory_trace.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def is_embedding_model(config) -> bool:
    """A bare encoder (architectures BertModel, RobertaModel, ...): trained for sentence embeddings."""
    return any(name.endswith("Model") and "For" not in name for name in getattr(config, "architectures", None) or [])


def embedding_loss(hidden_states):
    """In-batch contrastive loss on mean-pooled embeddings (sentence-transformers' MultipleNegativesRankingLoss,
    each sequence its own positive): pooled B x h and a B x B similarity, negligible beside the encoder."""
    import torch

    pooled = torch.nn.functional.normalize(hidden_states.mean(dim=1).float(), dim=-1)
    scores = pooled @ pooled.T / 0.05
    return torch.nn.functional.cross_entropy(scores, torch.arange(scores.shape[0]))


def model_class(config):
    from transformers import (
        AutoModel,
        AutoModelForCausalLM,
        AutoModelForImageClassification,
        AutoModelForImageTextToText,
        AutoModelForMaskedLM,
        AutoModelForSeq2SeqLM,
        AutoModelForSpeechSeq2Seq,
    )

    if config.model_type == "vit":
        return AutoModelForImageClassification
    if config.model_type == "whisper":
        return AutoModelForSpeechSeq2Seq
    if config.model_type == "llava":
        return AutoModelForImageTextToText
    if is_embedding_model(config):
        return AutoModel
    if getattr(config, "is_encoder_decoder", False):
        return AutoModelForSeq2SeqLM
    if config.model_type in ("bert", "roberta", "distilbert", "deberta", "deberta-v2", "electra"):
        return AutoModelForMaskedLM
    return AutoModelForCausalLM


def traced_batch(
    config, micro_batch: int, seq_len: int, dtype: Any = None
) -> tuple[dict[str, Any], Any, Callable[[Any], Any]]:
    """(the forward's keyword arguments, the input tensor MemTracker tracks, outputs -> loss). Audio frames
    come in `dtype`, the weights' (a bf16 Whisper's convolution takes bf16 frames)."""
    import torch

    if config.model_type == "vit":  # images: seq_len must be the patches + CLS the image gives
        pixels = torch.randn(micro_batch, config.num_channels, config.image_size, config.image_size)
        labels = torch.randint(0, config.num_labels, (micro_batch,))
        return {"pixel_values": pixels, "labels": labels}, pixels, lambda outputs: outputs.loss
    if config.model_type == "llava":  # one image per sequence: its tokens open the sequence, the text follows
        vision = config.vision_config
        pixels = torch.randn(micro_batch, vision.num_channels, vision.image_size, vision.image_size, dtype=dtype)
        image_tokens = (vision.image_size // vision.patch_size) ** 2
        input_ids = torch.randint(0, config.image_token_id, (micro_batch, seq_len))
        input_ids[:, :image_tokens] = config.image_token_id
        batch = {"pixel_values": pixels, "input_ids": input_ids, "labels": input_ids}
        return batch, input_ids, lambda outputs: outputs.loss
    if config.model_type == "clip":  # image-caption pairs, contrasted within the batch
        vision, text = config.vision_config, config.text_config
        pixels = torch.randn(micro_batch, vision.num_channels, vision.image_size, vision.image_size, dtype=dtype)
        input_ids = torch.randint(0, text.vocab_size, (micro_batch, seq_len))
        batch = {"pixel_values": pixels, "input_ids": input_ids, "return_loss": True}
        return batch, input_ids, lambda outputs: outputs.loss
    input_ids = torch.randint(0, config.vocab_size, (micro_batch, seq_len))
    if config.model_type == "whisper":  # 30 s of audio: 2 x max_source_positions mel frames; seq_len text tokens
        features = torch.randn(micro_batch, config.num_mel_bins, 2 * config.max_source_positions, dtype=dtype)
        return {"input_features": features, "labels": input_ids}, features, lambda outputs: outputs.loss
    if is_embedding_model(config):
        return {"input_ids": input_ids}, input_ids, lambda outputs: embedding_loss(outputs.last_hidden_state)
    return {"input_ids": input_ids, "labels": input_ids}, input_ids, lambda outputs: outputs.loss
