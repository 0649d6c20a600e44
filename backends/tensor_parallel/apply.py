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
from backends.tensor_parallel.collectives import gather_sequence
from backends.tensor_parallel.layers import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    padded_vocab,
)


def _split_heads(attention: nn.Module, attributes: tuple[str, ...], size: int, what: str) -> None:
    for name in attributes:
        value = getattr(attention, name, None)
        if isinstance(value, int):
            if value % size:
                raise ValueError(f"attention {name}={value} is not divisible by tensor parallelism {size} ({what})")
            setattr(attention, name, value // size)


def head_counts(config) -> tuple[int, int]:
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", None)
    return heads, getattr(config, "num_key_value_heads", None) or heads


def check_divisible(config, size: int) -> None:
    """Heads must split evenly and KV heads split or replicate evenly; say which does not
    (the vocabulary is padded instead)."""
    from planner.errors import UserInputError

    heads, kv_heads = head_counts(config)
    if heads % size:
        raise UserInputError(
            f"tensor parallelism {size} does not divide the model's {heads} attention heads; choose a tp that does"
        )
    if kv_heads % size and size % kv_heads:
        raise UserInputError(
            f"tensor parallelism {size} can neither split nor replicate the model's {kv_heads} "
            "key/value heads evenly; choose a tp that divides or is a multiple of them"
        )


def _kv_replica_group(tp_groups_ranks: list[list[int]], replicas: int):
    """The group of TP ranks holding the same key/value head; every rank creates every such group."""
    mine = None
    for ranks in tp_groups_ranks:
        for start in range(0, len(ranks), replicas):
            members = ranks[start : start + replicas]
            created = dist.new_group(members)
            if dist.get_rank() in members:
                mine = created
    return mine


def _gather_norm_output(module: nn.Module, inputs, output):
    return gather_sequence(output, module._tp_group)


def all_reduce_grad(group):
    """A gradient hook summing the gradient over `group` (a parameter each rank holds whole, fed partial inputs)."""

    def hook(grad):
        grad = grad.clone()
        dist.all_reduce(grad, group=group)
        return grad

    return hook


def apply_tensor_parallel(
    model: nn.Module, group, *, sequence_parallel: bool = False, tp_groups_ranks: list[list[int]] | None = None
) -> list[nn.Parameter]:
    """Shard `model` over `group`; returns the replicated parameters whose gradients are summed over TP under SP.

    tp_groups_ranks: the global ranks of every TP group of the job (needed only when the key/value heads
    are fewer than tp and must be replicated: the replica groups are created collectively)."""
    arch = architecture_of(model)
    size = dist.get_world_size(group)
    check_divisible(model.config, size)
    heads, kv_heads = head_counts(model.config)
    kv_replicas = size // kv_heads if kv_heads < size else 1
    replica_group = None
    if kv_replicas > 1 and arch.kv_projections:
        replica_group = _kv_replica_group(tp_groups_ranks or [list(range(dist.get_world_size()))], kv_replicas)
    kv_shard = (dist.get_rank(group) // kv_replicas, kv_heads) if replica_group is not None else None
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
            shard = kv_shard if path in arch.kv_projections else None
            column = ColumnParallelLinear(
                get_path(layer, path), group, sections=sections, sequence_parallel=sequence_parallel, shard=shard
            )
            set_path(layer, path, column)
            if shard is not None:  # each replica saw only its own query heads: sum over the replicas
                for param in column.parameters():
                    param.register_hook(all_reduce_grad(replica_group))
        for path in arch.row:
            row = RowParallelLinear(get_path(layer, path), group, sequence_parallel=sequence_parallel)
            set_path(layer, path, row)
            if row.bias is not None:
                partial_grads.append(row.bias)
        attention = get_path(layer, arch.attention)
        counts = arch.head_count_attributes
        if replica_group is not None:  # one key/value head per rank, shared by all its query heads
            counts = tuple(name for name in counts if name != "num_key_value_heads")
            if hasattr(attention, "num_key_value_heads"):
                attention.num_key_value_heads = 1
            attention.num_key_value_groups = heads // size
        _split_heads(attention, counts, size, "heads")
        _split_heads(attention, arch.width_attributes, size, "projection width")
        for path in arch.head_norms:  # each rank normalises its own heads with the whole weight
            for param in get_path(layer, path).parameters():
                param.register_hook(all_reduce_grad(group))
        norms.extend(get_path(layer, name) for name in arch.layer_norms)
    if token_embedding is not None:
        token_embedding = VocabParallelEmbedding(token_embedding, group)
        set_path(backbone, arch.token_embedding, token_embedding)
    if head is not None:
        model.lm_head = ColumnParallelLinear(
            head, group, sequence_parallel=sequence_parallel, pad_outputs_to=padded_vocab(model.config.vocab_size, size)
        )
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
            param.register_hook(all_reduce_grad(group))
    return partial_grads if sequence_parallel else []


def shard_specs(model: nn.Module) -> dict[str, tuple[int, int]]:
    """Parameter name -> (split dim, fused sections) for every TP-sharded parameter of `model`."""
    specs: dict[str, tuple[int, int]] = {}
    for module_name, module in model.named_modules():
        for param_name, spec in getattr(module, "shard_spec", {}).items():
            specs[f"{module_name}.{param_name}" if module_name else param_name] = spec
    return specs
