"""Build the model a run trains: from its HF config, randomly initialised or with empty (meta) weights.

`build_model` gives either a randomly initialised model (deterministic per
seed) or, for pretrained runs, a model whose parameters are on the meta
device (no memory) while its buffers are real, computed as the model's own
constructor computes them (rotary frequencies, position ids). Each adapter
then materialises only what its rank holds and fills it from the
checkpoint (weights.py): the whole model for DDP and ZeRO-0/1/2, a dim-0
shard for FSDP, a flat partition for ZeRO-3, a stage and a TP slice for our
engine's tp/pp. No code is ever fetched or run from the hub.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.contract.run_config import ModelSource

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PretrainedConfig, PreTrainedModel

    from backends.weights.source import WeightSource

LOSS_TYPES = {"causal-lm": "ForCausalLM", "masked-lm": "ForMaskedLM"}
DROPOUT_KEYS = (
    "attn_pdrop",
    "embd_pdrop",
    "resid_pdrop",
    "attention_dropout",
    "hidden_dropout",
    "dropout",
    "activation_dropout",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "dropout_rate",
    "summary_first_dropout",
)


def hf_config(
    model: ModelSource, *, tiny: bool = False, dropout: float | None = None, keep_vocab: bool = False
) -> PretrainedConfig:
    """The transformers config object (dropout overridden when asked, the tiny shape for smoke tests;
    keep_vocab: a tiny model that still reads the real tokenizer's ids)."""
    from transformers import AutoConfig

    from backends.weights.model_factory import tiny_config

    sizes = {"vocab_size": model.hf_config["vocab_size"]} if keep_vocab and "vocab_size" in model.hf_config else {}
    fields = tiny_config(model.hf_config, **sizes) if tiny else dict(model.hf_config)
    fields.pop("architectures", None)
    if fields.get("loss_type", "") is None:
        fields.pop("loss_type")  # an explicit null makes transformers warn; absent means the default loss
    fields.pop("auto_map", None)  # remote code is never run, so its class map is meaningless here
    if dropout is not None:
        for key in DROPOUT_KEYS:
            if key in fields:
                fields[key] = dropout
    model_type = fields.pop("model_type")
    return AutoConfig.for_model(model_type, **fields)


def model_class(task: str) -> type[PreTrainedModel]:
    import transformers

    return {
        "causal-lm": transformers.AutoModelForCausalLM,
        "masked-lm": transformers.AutoModelForMaskedLM,
        "seq2seq-lm": transformers.AutoModelForSeq2SeqLM,
    }[task]


def build_model(
    model: ModelSource,
    *,
    tiny: bool = False,
    dropout: float | None = None,
    seed: int = 0,
    empty: bool = False,
    keep_vocab: bool = False,
) -> Any:
    """The model; `empty`: parameters on the meta device (filled later from the checkpoint), buffers real."""
    import torch

    config = hf_config(model, tiny=tiny, dropout=dropout, keep_vocab=keep_vocab)
    factory = model_class(model.task)
    if empty:
        from accelerate import init_empty_weights

        with init_empty_weights(include_buffers=False):
            built = factory.from_config(config, trust_remote_code=False)
    else:
        torch.manual_seed(seed)
        built = factory.from_config(config, trust_remote_code=False)
    if getattr(config, "tie_word_embeddings", False):
        built.tie_weights()
    # transformers 5 names the loss after the class (GPT2LMHeadModel matches no pattern) and warns on every
    # run; the task says which loss it is.
    if getattr(built, "loss_type", "") is None and model.task in LOSS_TYPES:
        built.loss_type = LOSS_TYPES[model.task]
    return built


def is_meta(model: nn.Module) -> bool:
    return any(param.is_meta for param in model.parameters())


def materialize(module: nn.Module, device: torch.device) -> None:
    """Allocate `module`'s meta parameters on `device` (uninitialised), keeping the values of its buffers
    and the parameters it shares between modules (a head tied to the embedding stays one parameter)."""
    buffers = {name: buffer.detach().clone() for name, buffer in module.named_buffers() if not buffer.is_meta}
    owners: dict[int, list[tuple[Any, str]]] = {}
    for owner in module.modules():
        for key, param in owner._parameters.items():
            if param is not None:
                owners.setdefault(id(param), []).append((owner, key))
    module.to_empty(device=device)
    for places in owners.values():
        first_owner, first_key = places[0]
        for owner, key in places[1:]:  # to_empty gives each place its own tensor: share the first again
            owner._parameters[key] = first_owner._parameters[first_key]
    for name, buffer in module.named_buffers():
        if name in buffers:
            buffer.copy_(buffers[name].to(buffer.device))


def load_full(model: nn.Module, source: WeightSource, device: torch.device) -> nn.Module:
    """Every parameter of `model` from the checkpoint (materialising a meta model first); returns the model."""
    import torch

    expected = {name: tuple(param.shape) for name, param in model.named_parameters()}
    for name, shape in expected.items():
        source.check_shape(name, shape)
    if is_meta(model):
        materialize(model, device)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(source.read(name).to(device=param.device, dtype=param.dtype))
    return model


def fill_rows(local: torch.Tensor, source: WeightSource, name: str, first_row: int) -> None:
    """Copy rows [first_row, first_row + local rows) of checkpoint tensor `name` into `local`."""
    import torch

    if local.numel() == 0:
        return
    rows = local.shape[0] if local.dim() else 1
    piece = source.read(name, (slice(first_row, first_row + rows),)) if local.dim() else source.read(name)
    with torch.no_grad():
        local.copy_(piece.to(device=local.device, dtype=local.dtype).reshape(local.shape))


def place_whole(model: nn.Module, weights: WeightSource | None, device: torch.device) -> None:
    """The whole model on this rank's device: read from the checkpoint, or moved there."""
    if weights is not None:
        load_full(model, weights, device)
    elif device.type == "cuda":
        model.cuda()
