"""Apply Megatron-style tensor (and sequence) parallelism to an unmodified HF decoder, in place.

Per layer: attention q/k/v and the MLP up-projections become column-parallel
(heads, and GQA key/value heads, split across ranks), the attention output
and MLP down-projection row-parallel; the token embedding becomes
vocab-parallel and the LM head column-parallel with no output gather (the
loss is vocab-parallel). Under sequence parallelism the activations between
the projections are sequence shards: each norm's output is all-gathered
before the column projections and each row projection reduce-scatters.
"""

from __future__ import annotations

import torch.distributed as dist
from torch import nn

from backends.decoder_anatomy import architecture_of, decoder_layers, final_norm, get_path, set_path

from .collectives import gather_sequence
from .layers import ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding, padded_vocab


def _split_heads(attention: nn.Module, attributes: tuple[str, ...], size: int, what: str) -> None:
    for name in attributes:
        value = getattr(attention, name, None)
        if isinstance(value, int):
            if value % size:
                raise ValueError(f"attention {name}={value} is not divisible by tensor parallelism {size} ({what})")
            setattr(attention, name, value // size)


def check_divisible(config, size: int) -> None:
    """Heads and KV heads must split evenly; say which does not (the vocabulary is padded instead)."""
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    for label, value in (("attention heads", heads), ("key/value heads", kv_heads)):
        if value and value % size:
            from planner.errors import UserInputError

            raise UserInputError(f"tensor parallelism {size} does not divide the model's {value} {label}; choose a tp that does")


def _gather_norm_output(module: nn.Module, inputs, output):
    return gather_sequence(output, module._tp_group)


def _all_reduce_grad(group):
    def hook(grad):
        grad = grad.clone()
        dist.all_reduce(grad, group=group)
        return grad

    return hook


def apply_tensor_parallel(model: nn.Module, group, *, sequence_parallel: bool = False) -> list[nn.Parameter]:
    """Shard `model` over `group`; returns the replicated parameters whose gradients are summed over TP under SP."""
    arch = architecture_of(model)
    size = dist.get_world_size(group)
    check_divisible(model.config, size)
    backbone = get_path(model, arch.backbone)
    token_embedding = getattr(backbone, arch.token_embedding, None)  # None on later pipeline stages
    head = model.get_output_embeddings()  # None before the last pipeline stage
    tied = head is not None and token_embedding is not None and head.weight is token_embedding.weight
    partial_grads: list[nn.Parameter] = []
    norms: list[nn.Module] = []
    for layer in decoder_layers(model):
        if isinstance(layer, nn.Identity):
            continue  # another pipeline stage's layer
        for path, sections in arch.column:
            set_path(layer, path, ColumnParallelLinear(get_path(layer, path), group, sections=sections,
                                                       sequence_parallel=sequence_parallel))
        for path in arch.row:
            row = RowParallelLinear(get_path(layer, path), group, sequence_parallel=sequence_parallel)
            set_path(layer, path, row)
            if row.bias is not None:
                partial_grads.append(row.bias)
        attention = get_path(layer, arch.attention)
        _split_heads(attention, arch.head_count_attributes, size, "heads")
        _split_heads(attention, arch.width_attributes, size, "projection width")
        norms.extend(get_path(layer, name) for name in arch.layer_norms)
    if token_embedding is not None:
        token_embedding = VocabParallelEmbedding(token_embedding, group)
        set_path(backbone, arch.token_embedding, token_embedding)
    if head is not None:
        model.lm_head = ColumnParallelLinear(head, group, sequence_parallel=sequence_parallel,
                                             pad_outputs_to=padded_vocab(model.config.vocab_size, size))
        if tied:
            model.lm_head.weight = token_embedding.weight
    norm = final_norm(model)
    if norm is not None:
        norms.append(norm)
    if sequence_parallel:
        for module in norms:
            module._tp_group = group
            module.register_forward_hook(_gather_norm_output)
            partial_grads.extend(module.parameters())
        for param in partial_grads:
            param.register_hook(_all_reduce_grad(group))
    return partial_grads if sequence_parallel else []


def shard_specs(model: nn.Module) -> dict[str, tuple[int, int]]:
    """Parameter name -> (split dim, fused sections) for every TP-sharded parameter of `model`."""
    specs: dict[str, tuple[int, int]] = {}
    for module_name, module in model.named_modules():
        for param_name, spec in getattr(module, "shard_spec", {}).items():
            specs[f"{module_name}.{param_name}" if module_name else param_name] = spec
    return specs
