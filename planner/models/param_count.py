"""Exact parameter counts: build the real transformers model on the meta device.

The meta device allocates no memory, so even Llama-3.1-405B builds in seconds
on a laptop. The model is the class people train from a config.json:

- decoder-only: AutoModelForCausalLM (the LM head included, counted once when tied);
- encoder-decoder (T5): AutoModelForSeq2SeqLM;
- encoder-only (BERT, RoBERTa): AutoModel, the base model with its pooler. Its
  count is the one published (bert-base-uncased: 109,482,240) and the body of
  every fine-tuning class; task heads depend on the task (a classification
  head adds hidden x labels, BertForMaskedLM swaps the pooler for an MLM
  transform and a vocab bias, +31k) and are left out.
- vision (ViT): AutoModelForImageClassification, the encoder with its final
  norm and the classifier over the config's labels (no pooler).
- speech (Whisper): AutoModelForSpeechSeq2Seq, the audio encoder (convolutions and a
  frozen sinusoid table, counted in total but not trainable) and the text decoder.
- LLaVA: AutoModelForImageTextToText, the CLIP vision tower, the projector and the LLM with its head.
- CLIP: AutoModel (CLIPModel), both towers, both projections and the learned temperature.

torch and transformers are imported inside the functions so that reading the
catalog never pays for them.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: reading the catalog never imports torch
    from torch import nn
    from transformers import PreTrainedModel

from planner.models.spec import ParamCounts

# model_types whose checkpoints are encoders without a generic LM head.
_ENCODER_MODEL_TYPES = frozenset({"bert", "roberta", "clip"})
_VISION_MODEL_TYPES = frozenset({"vit"})
_SPEECH_MODEL_TYPES = frozenset({"whisper"})


@contextlib.contextmanager
def _quiet_transformers():
    """Silence the warnings transformers prints while building models from configs."""
    import transformers

    previous = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        transformers.logging.set_verbosity(previous)


def build_meta_model(config: dict) -> PreTrainedModel:
    """The transformers model for a config.json dict, with all weights on the meta device."""
    import torch
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForCausalLM,
        AutoModelForImageClassification,
        AutoModelForImageTextToText,
        AutoModelForSeq2SeqLM,
        AutoModelForSpeechSeq2Seq,
    )

    fields = dict(config)
    model_type = fields.pop("model_type", None)
    if not isinstance(model_type, str):
        raise ValueError("config has no model_type")
    with _quiet_transformers():
        hf_config = AutoConfig.for_model(model_type, **fields)
        auto_class: Any
        if model_type in _ENCODER_MODEL_TYPES:
            auto_class = AutoModel
        elif model_type in _VISION_MODEL_TYPES:
            auto_class = AutoModelForImageClassification
        elif model_type == "llava":
            auto_class = AutoModelForImageTextToText
        elif model_type in _SPEECH_MODEL_TYPES:
            auto_class = AutoModelForSpeechSeq2Seq
        elif getattr(hf_config, "is_encoder_decoder", False):
            auto_class = AutoModelForSeq2SeqLM
        else:
            auto_class = AutoModelForCausalLM
        with torch.device("meta"):
            model = auto_class.from_config(hf_config)
        # Under transformers 5, from_config leaves tied weights separate until tie_weights().
        model.tie_weights()
        _untie_if_config_says_so(model, config)
    return model


def _untie_if_config_says_so(model: PreTrainedModel, config: dict) -> None:
    """Give the LM head its own weight when the config says the checkpoint has one.

    transformers 5 ties T5's lm_head to the shared embedding whatever the config
    says, then from_pretrained unties it again when the checkpoint holds a
    different head (T5 v1.1, T0). What gets trained is the untied model.
    """
    import torch

    if config.get("tie_word_embeddings") is not False:
        return
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    if head is None or embedding is None or head.weight is not embedding.weight:
        return
    head.weight = torch.nn.Parameter(torch.empty_like(embedding.weight, device="meta"))


def _unique_parameters(module: nn.Module) -> dict[int, nn.Parameter]:
    # On meta there is no storage to compare, so identity is what tying shares.
    return {id(p): p for p in module.parameters()}


def _embedding_parameter_ids(model: PreTrainedModel) -> set[int]:
    """Lookup tables (tokens, positions, token types) plus a separate output head.

    T5's relative-attention bias tables are nn.Embedding too, but they belong to
    attention blocks, not to the embedding.
    """
    import torch

    ids: set[int] = set()
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Embedding) and "relative_attention_bias" not in name:
            ids.update(id(p) for p in module.parameters(recurse=False))
        if type(module).__name__ in ("ViTEmbeddings", "CLIPVisionEmbeddings"):  # patches, CLS and positions
            ids.update(id(p) for p in module.parameters())
    head = model.get_output_embeddings()
    if head is not None:
        ids.update(id(p) for p in head.parameters())
    return ids


def _inactive_expert_parameters(model: PreTrainedModel, experts_per_token: int) -> int:
    """Parameters of the experts a token skips, summed over MoE layers.

    transformers 5 stores a layer's experts either fused, as 3-D parameters
    with a leading expert dimension (Mixtral, Qwen2-MoE), or as a ModuleList
    of expert MLPs; both sit in a module named 'experts'.
    """
    import torch

    inactive = 0
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] != "experts":
            continue
        if isinstance(module, torch.nn.ModuleList):
            count = len(module)
            per_expert = sum(p.numel() for p in module[0].parameters()) if count else 0
        else:
            direct = list(module.parameters(recurse=False))
            count = getattr(module, "num_experts", direct[0].shape[0] if direct else 0)
            per_expert = sum(p.numel() for p in module.parameters()) // count if count else 0
        inactive += max(count - experts_per_token, 0) * per_expert
    return inactive


def count_params_on_meta(config: dict) -> ParamCounts:
    """Exact counts for a config.json dict, from the transformers class built on meta.

    Raises ImportError without torch/transformers, and ValueError (or the
    KeyError/TypeError transformers raises) for configs it cannot build.
    """
    import transformers

    model = build_meta_model(config)
    parameters = _unique_parameters(model)
    total = sum(p.numel() for p in parameters.values())
    trainable = sum(p.numel() for p in parameters.values() if p.requires_grad)
    embedding_ids = _embedding_parameter_ids(model)
    embedding = sum(p.numel() for key, p in parameters.items() if key in embedding_ids)
    # DeepSpeed's estimate_zero3_* definition: parameters a module owns directly.
    largest_layer = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    experts_per_token = getattr(model.config, "num_experts_per_tok", 0) or 0
    active = total - (_inactive_expert_parameters(model, experts_per_token) if experts_per_token else 0)
    return ParamCounts(
        total=total,
        trainable=trainable,
        active_per_token=active,
        embedding=embedding,
        largest_layer=largest_layer,
        source="meta-device",
        source_detail=f"transformers {transformers.__version__}",
    )
