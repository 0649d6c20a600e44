"""Model weights that move between layouts: gather a tp/pp-sharded model into full HF-named tensors, and back.

A run saved under dp2 x tp2 can continue under pp2 (or on one process, or in
HF `from_pretrained`) because the consolidated file holds plain full tensors
under the unsharded model's names; each rank then takes its own slice using
the shard specs of its layout. The file is safetensors (no pickle) and its
metadata records the layout it was written from.

What does not move between tp/pp layouts is the ZeRO optimizer state (its
flat buffers follow the stage's parameters); the engine's own checkpoint
load refuses such a resume with a clear error, and this file is the way to
carry the weights across.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from backends.decoder_anatomy import architecture_of
from backends.tensor_parallel.layers import pad_rows, padded_vocab, shard_tensor, unshard_tensor
from planner.errors import UserInputError
from planner.files import atomic_path

MODULE_PREFIX = "module."


def tied_parameter_names(model) -> tuple[str, str] | None:
    if not getattr(model.config, "tie_word_embeddings", False):
        return None
    arch = architecture_of(model)
    return f"{arch.backbone}.{arch.token_embedding}.weight", "lm_head.weight"


def local_parameters(parallel_model) -> dict[str, torch.Tensor]:
    return {name: param.detach() for name, param in parallel_model.module.named_parameters()}


def gather_full_state_dict(parallel_model, tensors: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """HF name -> full fp32 tensor, on every rank. `tensors` (default: the parameters) may carry a "module." prefix,
    e.g. the engine's fp32 master weights by parameter name."""
    groups = parallel_model.groups
    local = {
        name.removeprefix(MODULE_PREFIX): value
        for name, value in (tensors if tensors is not None else local_parameters(parallel_model)).items()
    }
    stage: dict[str, torch.Tensor] = {}
    for name in sorted(local):
        value = local[name].float().contiguous()
        spec = parallel_model.shard_specs.get(name)
        if spec is not None and groups.dims.tp > 1:
            parts = [torch.empty_like(value) for _ in range(groups.dims.tp)]
            dist.all_gather(parts, value, group=groups.tp_group)
            replicas = parallel_model.tp_replicas.get(name, 1)
            value = unshard_tensor(parts[::replicas], spec[0], spec[1])
        if name in parallel_model.padded_rows:
            value = value[: parallel_model.padded_rows[name]]  # drop the vocabulary padding
        stage[name] = value.clone()
    if parallel_model.expert_parallel is not None:  # every ep rank's experts of this stage, in expert order
        stage = parallel_model.expert_parallel.full_state(stage)
    if groups.dims.pp == 1:
        full = stage
    else:
        stages: list[Any] = [None] * groups.dims.pp
        dist.all_gather_object(stages, stage, group=groups.pp_group)
        full = {name: value for part in stages for name, value in part.items()}
    tied = tied_parameter_names(parallel_model.module)
    if tied and tied[0] in full:
        full[tied[1]] = full[tied[0]]
    return full


def load_full_state_dict(parallel_model, full: dict[str, torch.Tensor]) -> None:
    """Copy this rank's slice of every full tensor into its parameters; a missing or misshapen tensor is an error."""
    groups = parallel_model.groups
    tied = tied_parameter_names(parallel_model.module)
    with torch.no_grad():
        for name, param in parallel_model.module.named_parameters():
            source = full.get(name)
            if source is None and tied and name in tied:
                source = full.get(tied[0] if name == tied[1] else tied[1])
            if source is None:
                raise UserInputError(f"the checkpoint has no tensor '{name}'; it was saved from another model")
            value = local_slice(parallel_model, name, source)
            if value.shape != param.shape:
                raise UserInputError(
                    f"checkpoint tensor '{name}' has shape {tuple(source.shape)}, which does not fit this model "
                    f"(local shard {tuple(param.shape)} under tp={groups.dims.tp}); it was saved from another model"
                )
            param.copy_(value.to(param.dtype))


def local_slice(parallel_model, name: str, full: torch.Tensor) -> torch.Tensor:
    """This rank's part of the full (unpadded, HF-shaped) tensor `name` under its layout."""
    if parallel_model.expert_parallel is not None:
        full = parallel_model.expert_parallel.own_experts(name, full)
    spec = parallel_model.shard_specs.get(name)
    if spec is None:
        return full
    groups = parallel_model.groups
    if name in parallel_model.padded_rows:
        full = pad_rows(full, padded_vocab(full.shape[0], groups.dims.tp))
    replicas = parallel_model.tp_replicas.get(name, 1)
    return shard_tensor(full, spec[0], groups.tp_rank // replicas, groups.dims.tp // replicas, spec[1])


def layout_record(parallel_model) -> dict[str, Any]:
    """The ParallelDims the tensors were saved under (its JSON form), and whether the sequence was split."""
    return {"dims": parallel_model.dims.model_dump(mode="json"), "sequence_parallel": parallel_model.sequence_parallel}


def write_safetensors(path: str | Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> Path:
    """Write atomically: a crash leaves a hidden temporary file, never a truncated `path`."""
    from safetensors.torch import save_file

    path = Path(path)
    with atomic_path(path) as temporary:
        save_file({name: value.contiguous() for name, value in tensors.items()}, str(temporary), metadata=metadata)
    return path


def save_consolidated(parallel_model, path: str | Path, tensors: dict[str, torch.Tensor] | None = None) -> Path:
    """Every rank takes part; global rank 0 writes `path` (safetensors) atomically.

    `tensors` (default: the parameters) may be e.g. the engine's fp32 master weights by parameter name."""
    full = gather_full_state_dict(parallel_model, tensors)
    if dist.get_rank() == 0:
        tied = tied_parameter_names(parallel_model.module)
        if tied:
            full.pop(tied[1], None)  # written once, as HF's save_pretrained does; loaders restore the alias
        write_safetensors(path, full, {"format": "pt", "layout": json.dumps(layout_record(parallel_model))})
    dist.barrier()
    return Path(path)


def load_consolidated(parallel_model, path: str | Path) -> dict[str, Any]:
    """Load a consolidated file written under any layout; returns the layout it was saved from."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"no consolidated checkpoint at {path}; save one with save_consolidated first")
    with safe_open(str(path), framework="pt") as handle:
        saved_layout = json.loads((handle.metadata() or {}).get("layout", "{}"))
    load_full_state_dict(parallel_model, load_file(str(path)))
    return saved_layout
