"""Resume an engine checkpoint under another tensor/pipeline/expert layout (or another ZeRO stage or bucket size).

The shards of a tp/pp run are flat ZeRO units, one set per (pp, tp) rank (per ep
rank under expert parallelism), each laid out after that rank's parameters.
engine_state.json records every rank's units (names, shapes), how its tensors
split over tp (shard specs, key/value replicas, vocabulary padding) and which
are expert tensors split over ep, so any layout can rebuild them: each rank
reads the units that hold its parameters (DCP reads any data-parallel
sharding), cuts them into the old local tensors, joins the tp pieces (or the ep
ranks' experts, in expert order) into full HF tensors, and takes its own slice
under the new layout, for the master weights and every optimizer state alike.
Each rank reads the full units of the parameters it holds: a one-off cost at
resume, paid in host memory of about three copies of its stage's fp32 weights.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from backends.checkpoint.shards import key_prefix
from backends.ranks import distributed, everyones
from planner.errors import UserInputError

MODULE_PREFIX = "module."
RANK_KEY = re.compile(r"pp(\d+)\.tp(\d+)\.(?:ep(\d+)\.)?$")
EP_RANK_KEY = re.compile(r"ep(\d+)\.$")


def tensor_split_record(engine: Any) -> dict[str, Any]:
    """How this run's tensors split over tp and ep, from every rank (collective): a pipeline stage knows only
    the tensors of its own layers, so the record is the union of the stages'."""
    merged: dict[str, Any] = {"shard_specs": {}, "tp_replicas": {}, "padded_rows": {}, "expert_names": []}
    for record in everyones(_own_split_record(engine)):
        for key in ("shard_specs", "tp_replicas", "padded_rows"):
            merged[key].update(record[key])
        merged["expert_names"] = sorted({*merged["expert_names"], *record["expert_names"]})
    return merged


def _own_split_record(engine: Any) -> dict[str, Any]:
    model, expert_parallel = engine.parallel_model, getattr(engine, "expert_parallel", None)
    experts = sorted(expert_parallel.expert_names) if expert_parallel is not None else []
    if model is None:
        return {"shard_specs": {}, "tp_replicas": {}, "padded_rows": {}, "expert_names": experts}
    return {
        "shard_specs": {name: list(spec) for name, spec in model.shard_specs.items()},
        "tp_replicas": dict(model.tp_replicas),
        "padded_rows": dict(model.padded_rows),
        "expert_names": experts,
    }


def _rank_of(prefix: str) -> tuple[int, int, int]:
    """(pp, tp, ep) rank of a key prefix."""
    match = RANK_KEY.match(prefix)
    if match:
        return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
    match = EP_RANK_KEY.match(prefix)
    return (0, 0, int(match.group(1))) if match else (0, 0, 0)


def _inner(name: str) -> str:
    return name.removeprefix(MODULE_PREFIX)


def _aliases(engine: Any) -> dict[str, str]:
    """A tied head and embedding stand for each other (one stage or layout may hold only one of them)."""
    from backends.checkpoint.parallel_weights import tied_parameter_names

    tied = tied_parameter_names(engine.parallel_model.module if engine.parallel_model else engine.module)
    return {tied[0]: tied[1], tied[1]: tied[0]} if tied else {}


def _read_old_pieces(engine: Any, state: dict, shards: Path, wanted: set[str]) -> tuple[dict, dict]:
    """(state name -> parameter -> {(pp, tp): old local tensor}, old optimizer scalars) for the wanted names."""
    import torch
    import torch.distributed.checkpoint as dcp

    flat_names = list(engine.optimizer.flat_states())
    requests: dict[str, Any] = {}
    layouts = []
    for prefix, entry in state["model_ranks"].items():
        for index, unit in enumerate(entry["units"]):
            if wanted & {_inner(name) for name in unit["names"]}:
                layouts.append((prefix, index, unit))
                for flat in flat_names:
                    requests[f"{prefix}unit{index}.{flat}"] = torch.empty(unit["numel"], dtype=torch.float32)
    first = next(iter(state["model_ranks"]))
    scalars = {name: torch.empty_like(value) for name, value in engine.optimizer.scalar_states().items()}
    requests.update({f"{first}optimizer.{name}": value for name, value in scalars.items()})
    dcp.load(requests, checkpoint_id=str(shards), no_dist=not distributed())
    pieces: dict[str, dict[str, dict]] = {flat: {} for flat in flat_names}
    for prefix, index, unit in layouts:
        for flat in flat_names:
            values, offset = requests[f"{prefix}unit{index}.{flat}"], 0
            for name, shape in zip(unit["names"], unit["shapes"]):
                size = int(torch.Size(shape).numel())
                pieces[flat].setdefault(_inner(name), {})[_rank_of(prefix)] = values[offset : offset + size].view(shape)
                offset += size
    return pieces, {name: requests[f"{first}optimizer.{name}"] for name in scalars}


def _full_tensor(name: str, parts: dict[tuple[int, int, int], Any], split: dict, old_tp: int) -> Any:
    """The unsharded HF tensor from the old (pp, tp, ep) pieces of one parameter."""
    import torch

    if name in split.get("expert_names", ()):  # each ep rank held a run of experts: join them in expert order
        ranks = sorted({ep for _, _, ep in parts})
        runs = [{key: part for key, part in parts.items() if key[2] == ep} for ep in ranks]
        return torch.cat([_joined_over_tp(name, run, split, old_tp, ep) for run, ep in zip(runs, ranks)])
    return _joined_over_tp(name, parts, split, old_tp, min(ep for _, _, ep in parts))  # replicated over ep


def _joined_over_tp(name: str, parts: dict[tuple[int, int, int], Any], split: dict, old_tp: int, ep: int) -> Any:
    """One ep rank's tensor, its tp pieces joined."""
    from backends.tensor_parallel.layers import unshard_tensor

    stage = min(pp for pp, _, _ in parts)  # a tied head's copy on the last stage equals the embedding
    ordered = [parts[(stage, tp, ep)] for tp in range(old_tp) if (stage, tp, ep) in parts]
    spec = split["shard_specs"].get(name)
    if spec is None or old_tp == 1:
        full = ordered[0]  # replicated over tp (norms, biases of row-parallel layers) or never split
    else:
        full = unshard_tensor(ordered[:: split["tp_replicas"].get(name, 1)], spec[0], spec[1])
    rows = split["padded_rows"].get(name)
    return full[:rows] if rows else full


def _fill(engine: Any, pieces: dict, aliases: dict[str, str], state: dict, choice: Path) -> None:
    """Write every flat state of this rank from the old pieces (no collectives: a rank may stop half-way)."""
    from backends.checkpoint.parallel_weights import local_slice

    old_tp = int(state["layout"]["dims"]["tp"])
    expert_parallel = getattr(engine, "expert_parallel", None)
    for flat_name, target in engine.optimizer.flat_states().items():
        by_name = pieces[flat_name]
        for unit in engine.optimizer.units:
            values = []
            for name, param in zip(map(_inner, unit.names), unit.params):
                source = name if name in by_name else aliases.get(name)
                if source not in by_name:
                    raise UserInputError(f"{choice} has no tensor '{name}'; it was saved from another model")
                full = _full_tensor(source, by_name[source], state["tensor_split"], old_tp)
                try:  # (a parallel model's slice takes its experts too)
                    value = local_slice(engine.parallel_model, name, full) if engine.parallel_model else full
                except ValueError:  # the full tensor does not split into this layout's shards
                    value = full
                if engine.parallel_model is None and expert_parallel is not None:
                    value = expert_parallel.own_experts(name, value)
                if value.shape != param.shape:
                    raise UserInputError(
                        f"{choice} holds '{name}' with shape {tuple(full.shape)}, which does not fit "
                        f"this model ({tuple(param.shape)} here); it was saved from another model"
                    )
                values.append(value)
            start, _ = unit.owned_range
            flat = unit.flatten(values, target.dtype)
            target[unit.shard_start : unit.shard_start + unit.owned_real].copy_(flat[start : start + unit.owned_real])


def load_resharded(engine: Any, state: dict, choice: Path) -> None:
    """Fill this rank's master weights and optimizer states from a checkpoint of any layout; a checkpoint of another
    model is the same one-line error on every rank."""

    optimizer = engine.optimizer
    optimizer.ensure_optimizer_state()
    aliases = _aliases(engine)
    mine = {_inner(name) for unit in optimizer.units for name in unit.names}
    pieces, scalars = _read_old_pieces(
        engine, state, choice / "shards", mine | {aliases[n] for n in mine if n in aliases}
    )
    errors: list[Any] = [None]
    try:
        _fill(engine, pieces, aliases, state, choice)
    except UserInputError as error:
        errors = [str(error)]
    errors = everyones(errors[0])
    first_error = next((error for error in errors if error), None)
    if first_error:
        raise UserInputError(first_error)
    for name, value in optimizer.scalar_states().items():
        value.copy_(scalars[name])


def resume_state_for(engine: Any, state: dict) -> dict:
    """This rank's scaler and scheduler: its own entry, or (new stage or tp rank) the first rank's."""
    ranks = state["model_ranks"]
    return ranks.get(key_prefix(engine)) or ranks[next(iter(ranks))]
