"""The model's own tensors that ZeRO's flat units do not take over, made ready before they are built.

ZeroOptimizer (optimizer.py) re-points every trainable parameter at its flat unit; what is left (floating
buffers, frozen parameters) must be in the compute dtype, and a model built on the meta device (docs/engine.md)
needs real, still empty, parameters to re-point.
"""

from __future__ import annotations

from typing import Any


def cast_everything_else(model: Any, dtype: Any) -> None:
    """Floating buffers and frozen parameters to the compute dtype; trainable ones are re-pointed by the stage."""
    for module in model.modules():
        for name, buffer in module._buffers.items():
            if buffer is not None and buffer.is_floating_point():
                module._buffers[name] = buffer.to(dtype)
        for param in module._parameters.values():
            if param is not None and not param.requires_grad and param.is_floating_point():
                param.data = param.data.to(dtype)


def replace_meta_parameters(model: Any, device: Any, dtype: Any) -> None:
    """Swap meta parameters for real ones of the same shape holding no memory yet (tied ones stay tied);
    move the buffers, which a meta-built model keeps real, to the device."""
    import torch

    replaced: dict[int, Any] = {}
    for module in model.modules():
        for key, param in module._parameters.items():
            if param is None or not param.is_meta:
                continue
            if id(param) not in replaced:
                empty = torch.empty(param.shape, dtype=dtype, device=device)
                empty.untyped_storage().resize_(0)
                replaced[id(param)] = torch.nn.Parameter(empty, requires_grad=param.requires_grad)
            module._parameters[key] = replaced[id(param)]
        for key, buffer in module._buffers.items():
            if buffer is not None:
                module._buffers[key] = buffer.to(device)
