"""An MoE block under tensor parallelism: what the engine adds around ExpertParallelExperts (docs/parallelism.md).

Each tp rank holds a tp-th of the ffn of every expert it owns (dispatch.py) and the whole router, so the block is
treated as a column- then row-parallel MLP is (Megatron's expert tensor parallelism):

- its input is the full sequence on every tp rank: copied into the tp region (identity forward, the gradients
  summed over tp in backward), or, under sequence parallelism, gathered by the norm before it
  (backends/tensor_parallel/apply.py);
- its output, each rank's partial sum of the experts' outputs weighted by the router, is summed over tp (all-reduce,
  or reduce-scatter onto the sequence shards under SP);
- each rank's router weights get the gradient through its partial output only: summed over tp in backward.

The router's load-balancing loss comes from the same logits on every tp rank, so each rank back-propagates a
tp-th of it and the router's summed gradient counts it once (router_loss.py).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from backends.decoder_anatomy import decoder_layers, get_path
from backends.tensor_parallel.apply import all_reduce_grad
from backends.tensor_parallel.collectives import copy_to_tp, reduce_from_tp, reduce_scatter_sequence


def moe_blocks(model: nn.Module, path: str) -> list[nn.Module]:
    """This rank's MoE blocks (layers of other pipeline stages are nn.Identity; a family may keep dense MLPs in
    some layers at the same path, Qwen3-MoE's mlp_only_layers)."""
    layers = [layer for layer in decoder_layers(model) if not isinstance(layer, nn.Identity)]
    return [get_path(layer, path) for layer in layers if hasattr(get_path(layer, path), "experts")]


def apply_moe_tensor_parallel(model: nn.Module, path: str, group: Any, *, sequence_parallel: bool) -> None:
    """Wrap every MoE block at `path` (inside each layer) for tensor parallelism over `group`, in place."""
    from planner.errors import UserInputError

    layers = [layer for layer in decoder_layers(model) if not isinstance(layer, nn.Identity)]
    if len(moe_blocks(model, path)) != len(layers):
        raise UserInputError(
            f"{type(model).__name__} has dense MLP layers beside its MoE layers (mlp_only_layers or "
            "decoder_sparse_step), which the engine's tensor parallelism does not split; use tp 1 (ep and pp)"
        )
    reduce = reduce_scatter_sequence if sequence_parallel else reduce_from_tp
    for block in moe_blocks(model, path):
        if not sequence_parallel:
            block.register_forward_pre_hook(lambda module, args: (copy_to_tp(args[0], group), *args[1:]))
        block.register_forward_hook(lambda module, args, output: reduce(output, group))
        for name, param in block.named_parameters():
            if not name.startswith("experts."):  # the router: whole on every rank, a partial gradient on each
                param.register_hook(all_reduce_grad(group))
