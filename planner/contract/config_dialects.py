"""Configs written for the seed libraries, read in our vocabulary (docs/engine.md, "Configs from other libraries").

The libraries this project grew from took a flat training dict and blocks of their own, and a user coming
from them passes that dict to `backends.initialize` (or `load_engine_config`) as it is:

    {"batch_size": 4, "zero_stage": 2, "fp16": True, "gradient_accumulation_steps": 2, "save_dir": "ckpt",
     "cpu_offload": {"enabled": True}, "communication": {"backend": "gloo", "overlap": True},
     "compression": {"enabled": True, "type": "int8"}, "profiling": {"enabled": True, "step": 3}}

`translate_seed_keys` rewrites each such key into the key of ours that does the same thing, before the
DeepSpeed table (planner/contract/deepspeed_keys.py) and EngineConfig's strict validation read the
document, and records its fate ("became train_micro_batch_size_per_gpu 4") in the list the engine prints
once at start-up (engine_config.key_fates_line), beside the DeepSpeed keys'. A seed key with no
equivalent, switched on, is one UserInputError naming the nearest thing we have; switched off, it is
dropped and said so. A value out of range is one line naming the seed key and what it accepts; a seed key
and the key of ours it becomes, both set to different values, is one line. `gradient_accumulation_steps`
is DeepSpeed's key and ours already. `initialize(..., pipeline=True)`, the same dialect's argument, is read
by backends/engine/initialize_args.py (`with_pipeline_flag`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from planner.errors import UserInputError
from planner.limits import MAX_BATCH, check_count

COMPRESSION_TYPES = ("fp32", "fp16", "bf16", "int8", "onebit", "none")  # hardware_selector.compression's values
COMPRESSION_ALIASES = {"1bit": "onebit", "1-bit": "onebit"}  # the seed's (and DeepSpeed's 1-bit Adam's) name


class _Refused(ValueError):
    """A seed key's value that no key of ours can take; load turns it into one UserInputError line."""


def _switch(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Refused(f"{name} must be true or false, not {value!r}")
    return value


def _one_of(name: str, value: Any, accepted: tuple) -> Any:
    if not any(value == choice and type(value) is type(choice) for choice in accepted):  # True is not 1
        raise _Refused(f"{name} must be one of {', '.join(map(str, accepted))}, not {value!r}")
    return value


def _count(name: str, value: Any, high: int = MAX_BATCH) -> int:
    try:
        return check_count(name, value, high=high)
    except UserInputError as error:
        raise _Refused(str(error)) from None


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Refused(f"{name} must be a folder path (a non-empty string), not {value!r}")
    return value


def _block(name: str, value: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    """A seed block: `true`/`false` alone means {"enabled": ...}; a dict may hold only `fields`."""
    if isinstance(value, bool) and "enabled" in fields:
        return {"enabled": value}
    if not isinstance(value, dict):
        raise _Refused(f"{name} must be {'true, false or ' if 'enabled' in fields else ''}a block, not {value!r}")
    unknown = [key for key in value if key not in fields]
    if unknown:
        raise _Refused(f"{name}.{unknown[0]} is not a key of {name}; it takes {', '.join(fields)}")
    return value


def _enabled(name: str, block: dict[str, Any]) -> bool:
    return _switch(f"{name}.enabled", block.get("enabled", True))


# Each translator takes (seed key, value) and returns {our dotted key: value}; {} means "off: dropped".
def _precision(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, bool):
        raise _Refused(f"{name} must be true or false (or DeepSpeed's {name} block), not {value!r}")
    return {f"{name}.enabled": value}


def _cpu_offload(name: str, value: Any) -> dict[str, Any]:
    block = _block(name, value, ("enabled", "pin_memory"))
    target = "zero_optimization.offload_optimizer"
    updates: dict[str, Any] = {f"{target}.device": "cpu" if _enabled(name, block) else "none"}
    if "pin_memory" in block:
        updates[f"{target}.pin_memory"] = _switch(f"{name}.pin_memory", block["pin_memory"])
    return updates


def _cpu_offload_params(name: str, value: Any) -> dict[str, Any]:
    block = _block(name, value, ("enabled", "pin_memory"))
    if _enabled(name, block):
        raise _Refused(
            f"{name} = {value!r} has no equivalent in our engine (parameters stay on the device); the nearest is "
            "cpu_offload, our zero_optimization.offload_optimizer {device: cpu}: optimizer states and fp32 master "
            "weights in host memory"
        )
    return {}


def _compression(name: str, value: Any) -> dict[str, Any]:
    block = {"enabled": True, "type": value} if isinstance(value, str) else _block(name, value, ("enabled", "type"))
    if not _enabled(name, block):
        return {"hardware_selector.compression": "none"}
    kind = block.get("type")
    kind = COMPRESSION_ALIASES.get(kind, kind) if isinstance(kind, str) else kind
    if kind not in COMPRESSION_TYPES:
        raise _Refused(
            f"{name} type {kind!r} has no equivalent in our engine; the nearest is hardware_selector.compression "
            f"'int8' (8-bit gradients with error feedback) or 'onebit'; accepted types: {', '.join(COMPRESSION_TYPES)}"
        )
    return {"hardware_selector.compression": kind}


_COMMUNICATION = {  # seed sub-key: (our dotted key, how its value is read)
    "backend": ("hardware_selector.dist_backend", lambda name, value: _one_of(name, value, ("gloo", "nccl"))),
    "data_type": ("communication_data_type", lambda name, value: _one_of(name, value, ("fp32", "fp16", "bf16"))),
    "overlap": ("zero_optimization.overlap_comm", _switch),
    "bucket_size": ("zero_optimization.reduce_bucket_size", lambda name, value: _count(name, value, 1 << 40)),
}


def _communication(name: str, value: Any) -> dict[str, Any]:
    block = _block(name, value, tuple(_COMMUNICATION))
    return {target: read(f"{name}.{key}", block[key]) for key, (target, read) in _COMMUNICATION.items() if key in block}


def _profiling(name: str, value: Any) -> dict[str, Any]:
    block = _block(name, value, ("enabled", "step", "output_dir"))
    if not _enabled(name, block):
        return {}
    ours: dict[str, Any] = {}  # what is not given keeps our block's default
    if "step" in block:
        ours["step"] = _count(f"{name}.step", block["step"], 1 << 40)
    if "output_dir" in block:
        ours["output"] = _text(f"{name}.output_dir", block["output_dir"])
    return {"hardware_selector.profiling": ours}


@dataclass(frozen=True)
class SeedKey:
    translate: Callable[[str, Any], dict[str, Any]]
    applies: Callable[[Any], bool] = lambda value: True  # False: the key is DeepSpeed's / ours in this form


SEED_KEYS: dict[str, SeedKey] = {
    "batch_size": SeedKey(lambda name, value: {"train_micro_batch_size_per_gpu": _count(name, value)}),
    "zero_stage": SeedKey(lambda name, value: {"zero_optimization.stage": _one_of(name, value, (0, 1, 2, 3))}),
    "fp16": SeedKey(_precision, applies=lambda value: not isinstance(value, dict)),
    "bf16": SeedKey(_precision, applies=lambda value: not isinstance(value, dict)),
    "save_dir": SeedKey(lambda name, value: {"hardware_selector.checkpoint.save_dir": _text(name, value)}),
    "cpu_offload": SeedKey(_cpu_offload),
    "cpu_offload_params": SeedKey(_cpu_offload_params),
    "compression": SeedKey(_compression),
    "communication": SeedKey(_communication),
    "profiling": SeedKey(_profiling),
}


def translate_seed_keys(document: dict, origin: str, fates: list[tuple[str, str]]) -> dict:
    """`document` with every seed key rewritten into ours; each key's fate appended to `fates`."""
    translated = dict(document)
    for name, rule in SEED_KEYS.items():
        if name not in translated or not rule.applies(translated[name]):
            continue
        value = translated.pop(name)
        try:
            updates = rule.translate(name, value)
        except _Refused as refused:
            raise UserInputError(f"{origin}: {refused} (docs/engine.md, Configs from other libraries)") from None
        for path, ours in updates.items():
            _put(translated, path, ours, origin, name)
        fate = ", ".join(f"{path} {_shown(ours)}" for path, ours in updates.items())
        fates.append((name, f"became {fate}" if updates else "dropped"))
    return translated


def _put(document: dict, path: str, value: Any, origin: str, seed_key: str) -> None:
    """Set the dotted `path` of `document` (copying the blocks on the way); a different value there is one line."""
    *parents, key = path.split(".")
    holder = document
    for part in parents:
        block = holder.get(part)
        if block is not None and not isinstance(block, dict):
            return  # not a block: EngineConfig's validation names it
        holder[part] = dict(block or {})
        holder = holder[part]
    if key in holder and holder[key] != value:
        raise UserInputError(
            f"{origin}: {seed_key} sets {path} {_shown(value)}, and the config sets {path} {_shown(holder[key])}; "
            "keep one of them"
        )
    holder[key] = value


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_shown(item)}" for key, item in value.items()) + "}"
    return str(value).lower() if isinstance(value, bool) else str(value)
