"""deepspeed.initialize's arguments, read the way our config-driven engine needs them.

DeepSpeed takes an optimizer and a scheduler either as config blocks or as
objects; our engine builds its own optimizer over the ZeRO partitions, so an
object is read back into the config's block:

- `optimizer`: a torch AdamW, Adam or SGD (or a function of the parameters
  that returns one) becomes the `optimizer` block with its hyperparameters.
  Given with a config block too, the object wins, as DeepSpeed's initialize
  documents ("This overrides any optimizer definition in the DeepSpeed json
  config"), and the config-keys line says the block was overridden: a plan's
  GPU ds_config.json carries an optimizer block, and a script written for
  DeepSpeed passes its own AdamW (docs/integrations.md).
- `lr_scheduler`: a function of the optimizer (DeepSpeed's callable form) is
  called with the engine's optimizer; a scheduler object built on another
  optimizer cannot drive ours and is one line saying to pass the function.
- `model_parameters` must be the model's trainable parameters: the engine
  trains what requires a gradient, and says so rather than train another set.
- `training_data` gives the third element of the tuple: a DataLoader over
  this rank's share (DistributedSampler over the data-parallel ranks, the
  engine's micro-batch), as DeepSpeed's.
- `pipeline=True`, the seed libraries' argument (planner/contract/config_dialects.py
  reads the rest of their dialect): every rank the other splits leave becomes a
  pipeline stage, hardware_selector.layout.pp, when our engine can pipeline the
  model; otherwise one line naming what to do.
"""

from __future__ import annotations

import os
from typing import Any

from planner.contract.engine_config import EngineConfig, with_changes
from planner.errors import UserInputError

TORCH_OPTIMIZERS = {"AdamW": "AdamW", "Adam": "Adam", "SGD": "SGD"}


def with_optimizer_object(settings: EngineConfig, optimizer: Any, model: Any, explicit_block: bool) -> EngineConfig:
    """`settings` whose optimizer block is the one `optimizer` (a torch optimizer or a factory) describes."""
    if optimizer is None:
        return settings
    if callable(optimizer) and not hasattr(optimizer, "param_groups"):
        optimizer = optimizer(list(model.parameters()))
    kind = TORCH_OPTIMIZERS.get(type(optimizer).__name__)
    if kind is None or not hasattr(optimizer, "param_groups"):
        raise UserInputError(
            f"optimizer {type(optimizer).__name__} is not one our engine runs under ZeRO; pass torch.optim.AdamW, "
            f"Adam or SGD, or an optimizer block in the config"
        )
    groups = optimizer.param_groups
    keys = ("lr", "betas", "eps", "weight_decay", "momentum", "nesterov", "dampening")
    first = {key: groups[0][key] for key in keys if key in groups[0]}
    if any({key: group[key] for key in first} != first for group in groups[1:]):
        raise UserInputError(
            "the optimizer's parameter groups have different hyperparameters; our engine runs one group: "
            "give one setting (or use the config's optimizer block)"
        )
    params: dict[str, Any] = {key: float(value) for key, value in first.items() if key in ("lr", "eps", "weight_decay")}
    if "betas" in first:
        params["betas"] = tuple(float(beta) for beta in first["betas"])
    if kind == "SGD":
        params.update(momentum=float(first.get("momentum", 0.0)), nesterov=bool(first.get("nesterov", False)))
        params["dampening"] = float(first.get("dampening", 0.0))
    if kind == "Adam":
        params["adam_w_mode"] = False  # torch's Adam adds weight decay to the gradient: DeepSpeed's Adam without AdamW
    fate = ("optimizer", "overridden by initialize's optimizer object, as DeepSpeed's is") if explicit_block else None
    return with_changes(settings, {"optimizer": {"type": kind, "params": params}}, fate)


def with_pipeline_flag(settings: EngineConfig, pipeline: Any, model: Any, world_size: int) -> EngineConfig:
    """`settings` whose layout pipelines the model over the ranks when `pipeline` is True (the seed dialect)."""
    if pipeline is None or pipeline is False:
        return settings
    if pipeline is not True:
        raise UserInputError(f"initialize's pipeline must be True or False, not {pipeline!r}")
    block = settings.hardware_selector
    layout = block.layout
    if layout.pp > 1:
        return with_changes(settings, {}, ("pipeline=True", f"kept hardware_selector.layout.pp {layout.pp}"))
    from backends.decoder_anatomy import ARCHITECTURES

    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in ARCHITECTURES:
        raise UserInputError(
            f"initialize(pipeline=True): our engine pipelines Hugging Face models of {', '.join(sorted(ARCHITECTURES))}"
            f", and this {type(model).__name__} is not one; drop pipeline=True (ZeRO trains any module)"
        )
    others = (layout.dp or 1) * layout.tp * layout.cp  # the ranks each stage spans
    stages = world_size // others
    if stages < 2 or world_size % others:
        raise UserInputError(
            f"initialize(pipeline=True) splits the model into pipeline stages over the ranks, and {world_size} "
            f"rank(s) over {others} per stage (dp x tp x cp) make no 2 stages; start it under torchrun "
            f"--nproc_per_node={2 * others} (or a multiple), or set hardware_selector.layout.pp"
        )
    pipelined = {**block.model_dump(), "layout": {**layout.model_dump(), "pp": stages}}
    return with_changes(
        settings, {"hardware_selector": pipelined}, ("pipeline=True", f"became hardware_selector.layout.pp {stages}")
    )


def check_argument_types(training_data: Any, model_parameters: Any, collate_fn: Any, metrics_path: Any) -> None:
    """Each argument of another kind is one line naming it, before anything is built: an int for
    training_data or model_parameters failed deep in the DataLoader or a set comprehension. (lr_scheduler is
    scheduler_from's: a scheduler object gets its own line.)"""
    import torch

    if training_data is not None and not (hasattr(training_data, "__len__") and hasattr(training_data, "__getitem__")):
        raise UserInputError(
            f"training_data must be a map-style dataset (a torch Dataset or a list: len() and indexing), not "
            f"{type(training_data).__name__}"
        )
    if model_parameters is not None:
        items = list(model_parameters) if hasattr(model_parameters, "__iter__") else None
        if items is None or not all(isinstance(item, torch.Tensor) for item in items):
            raise UserInputError(
                f"model_parameters must be the model's parameters (model.parameters()), not "
                f"{type(model_parameters).__name__}"
            )
    if collate_fn is not None and not callable(collate_fn):
        raise UserInputError(f"collate_fn must be a function, not {type(collate_fn).__name__} {collate_fn!r}")
    if metrics_path is not None and not isinstance(metrics_path, (str, os.PathLike)):
        raise UserInputError(f"metrics_path must be a file path (str or Path), not {type(metrics_path).__name__}")


def check_model_parameters(model: Any, model_parameters: Any) -> None:
    if model_parameters is None:
        return
    given = {id(param) for param in model_parameters}
    trainable = {id(param) for param in model.parameters() if param.requires_grad}
    if given != trainable:
        raise UserInputError(
            f"model_parameters holds {len(given)} tensors but the model has {len(trainable)} trainable ones; "
            f"our engine trains the parameters that require a gradient: freeze the others with requires_grad=False"
        )


def scheduler_from(lr_scheduler: Any, engine: Any) -> Any:
    """The engine's scheduler: the config's block, or DeepSpeed's callable form called with our optimizer."""
    if lr_scheduler is None:
        return engine.lr_scheduler
    if engine.lr_scheduler is not None:
        raise UserInputError("a scheduler was given both as lr_scheduler and in the config's scheduler block")
    if hasattr(lr_scheduler, "step") and hasattr(lr_scheduler, "optimizer"):
        raise UserInputError(
            "lr_scheduler is bound to another optimizer; pass a function that builds it, "
            "lr_scheduler=lambda optimizer: torch.optim.lr_scheduler.LambdaLR(optimizer, ...), or a scheduler block"
        )
    if not callable(lr_scheduler):
        raise UserInputError("lr_scheduler must be a function of the optimizer that returns a torch scheduler")
    engine.lr_scheduler = lr_scheduler(engine.optimizer.optimizer)  # the torch optimizer over the master weights
    return engine.lr_scheduler


def data_loader(training_data: Any, engine: Any, collate_fn: Any = None) -> Any:
    """DeepSpeed's training_data: a loader of this data-parallel rank's micro-batches (None without data)."""
    if training_data is None:
        return None
    from torch.utils.data import DataLoader, DistributedSampler

    sampler = DistributedSampler(
        training_data, num_replicas=engine.data_parallel_world, rank=engine.data_parallel_rank, shuffle=True
    )
    return DataLoader(training_data, batch_size=engine.micro_batch, sampler=sampler, collate_fn=collate_fn)
