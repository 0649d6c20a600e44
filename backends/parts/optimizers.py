"""The torch optimizer an engine.json `optimizer` block names (DeepSpeed's meaning of each type)."""

from __future__ import annotations

from typing import Any

from planner.contract.engine_config import OptimizerBlock


def build_torch_optimizer(params: Any, block: OptimizerBlock) -> Any:
    import torch

    options = block.params
    if block.type == "SGD":
        return torch.optim.SGD(
            params,
            lr=options.lr,
            momentum=options.momentum,
            dampening=options.dampening,
            weight_decay=options.weight_decay,
            nesterov=options.nesterov,
        )
    # DeepSpeed's "Adam" decouples weight decay (AdamW) unless adam_w_mode is false.
    decoupled = block.type == "AdamW" or options.adam_w_mode
    kind = torch.optim.AdamW if decoupled else torch.optim.Adam
    return kind(params, lr=options.lr, betas=options.betas, eps=options.eps, weight_decay=options.weight_decay)


def build_flat_shard_optimizer(flat: Any, block: OptimizerBlock) -> Any:
    """The optimizer over the engine's flat fp32 master shard: on the CPU, Adam / AdamW stepped chunk by chunk in
    place (backends/parts/chunked_adamw.py; no shard-sized temporaries, bit-identical to torch's); on a GPU,
    torch's own as before (its foreach or fused kernels step the shard in a few launches); SGD as above."""
    if block.type == "SGD" or flat.device.type != "cpu":
        return build_torch_optimizer([flat], block)
    from backends.parts.chunked_adamw import ChunkedAdam

    options = block.params
    return ChunkedAdam(
        [flat],
        lr=options.lr,
        betas=options.betas,
        eps=options.eps,
        weight_decay=options.weight_decay,
        decoupled_weight_decay=block.type == "AdamW" or options.adam_w_mode,
    )
