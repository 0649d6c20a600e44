"""The scalar loss in a model's output: a tensor, an output with .loss, a dict's "loss" or a tuple's first item.

engine.backward, engine.train_batch and ZeroOptimizer.backward take the loss or the whole output alike
(docs/engine.md).
"""

from __future__ import annotations

from typing import Any

from planner.errors import UserInputError


def describe_value(value: Any) -> str:
    """tensor(2, 3) for a tensor, its type's name for anything else: what an error says it was given."""
    shape = getattr(value, "shape", None)
    return f"tensor{tuple(shape)}" if shape is not None else type(value).__name__


def loss_of(output: Any) -> Any:
    """The scalar loss in a model's output; one line when there is none."""
    import torch

    loss = output
    if not torch.is_tensor(output):
        if getattr(output, "loss", None) is not None:
            loss = output.loss
        elif isinstance(output, dict) and "loss" in output:
            loss = output["loss"]
        elif isinstance(output, (tuple, list)) and len(output) > 0:
            loss = output[0]
    if not torch.is_tensor(loss) or loss.numel() != 1:
        raise UserInputError(
            f"the model returned {describe_value(loss)}, not a loss: return the loss from forward (a scalar tensor), "
            f"an output with .loss, or a tuple whose first item is the loss"
        )
    return loss.reshape(())
