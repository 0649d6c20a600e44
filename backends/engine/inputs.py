"""How the engine calls a model with a batch, and where it finds the loss in what comes back.

As in DeepSpeed, `engine(*args, **kwargs)` calls `model(*args, **kwargs)` and
returns the model's own output, so `outputs = engine(**batch); outputs.loss`
works. One positional batch is spread the way a training loop means it:

- a dict: the keyword arguments (`model(**batch)`);
- a tuple or a list: the positional arguments (`model(x, y)`);
- a tensor: the one argument (`model(x)`).

A Hugging Face model (a forward that takes `input_ids` and `labels`) given
token ids alone, or an (ids, labels) pair, is called as
`model(input_ids=ids, labels=labels)`, the labels defaulting to the ids as
for causal language models. A batch the model's forward cannot take is one
line at the call, naming the forward's signature (docs/engine.md).

The loss is the output itself when it is a scalar tensor, else its `.loss`,
its `["loss"]`, or its first item.
"""

from __future__ import annotations

import inspect
from typing import Any

from backends.parts.loss import describe_value
from planner.errors import UserInputError


def moved(value: Any, device: Any) -> Any:
    """Tensors in `value` (nested in tuples, lists and dicts) on `device`."""
    if hasattr(value, "to") and hasattr(value, "dtype"):
        return value.to(device)
    if isinstance(value, dict):
        return {key: moved(item, device) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(moved(item, device) for item in value)
    return value


def _forward_parameters(model: Any) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return {}


def takes_token_ids(model: Any) -> bool:
    parameters = _forward_parameters(model)
    return "input_ids" in parameters and "labels" in parameters


def module_call(model: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The (args, kwargs) `model` is called with for `engine(*args, **kwargs)`; one line if it cannot take them."""
    if len(args) == 1 and not kwargs:
        batch = args[0]
        if takes_token_ids(model) and not isinstance(batch, dict):
            ids, labels = batch if isinstance(batch, (tuple, list)) else (batch, batch)
            return (), {"input_ids": ids, "labels": labels}
        if isinstance(batch, dict):
            if takes_token_ids(model) and "input_ids" in batch and "labels" not in batch:
                batch = {**batch, "labels": batch["input_ids"]}
            args, kwargs = (), dict(batch)
        elif isinstance(batch, (tuple, list)):
            args = tuple(batch)
    try:
        inspect.signature(model.forward).bind(*args, **kwargs)
    except TypeError as failure:
        given = ", ".join([*(describe_value(arg) for arg in args), *(f"{key}=..." for key in kwargs)])
        raise UserInputError(
            f"{type(model).__name__}.forward{inspect.signature(model.forward)} cannot take ({given}): {failure}; "
            f"call engine(x), engine(x, y) or engine(**batch) with what the forward takes"
        ) from None
    except ValueError:
        pass  # no inspectable signature (a C++ module): let the call decide
    return args, kwargs


def count_tokens(args: tuple, kwargs: dict) -> int:
    """Token ids in the batch (integer tensors), else its samples: what tokens/s counts."""
    values = [*args, *kwargs.values()]
    first = kwargs.get("input_ids", values[0] if values else None)
    if first is None or not hasattr(first, "numel"):
        return 0
    return int(first.numel()) if not first.is_floating_point() else int(first.shape[0]) if first.dim() else 1
