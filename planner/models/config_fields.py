"""Typed reads of the fields of a Hugging Face config.json.

Configs spell the same dimension several ways (n_embd, hidden_size, d_model)
and may hold anything: every read here checks the type and range and, when it
fails, raises ConfigFieldError naming the field, so the user hears "field
'hidden_size' must be an integer, got 'big'" rather than a traceback.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from planner.errors import ConfigFieldError
from planner.limits import MAX_LAYERS, MAX_WIDTH

_MISSING = object()


# Fields that count blocks: a config with more than MAX_LAYERS is a typo (and would take minutes to build).
LAYER_FIELDS = frozenset(
    {
        "num_hidden_layers",
        "n_layer",
        "num_layers",
        "num_decoder_layers",
        "num_encoder_layers",
        "encoder_layers",
        "decoder_layers",
    }
)


class ConfigFields:
    """Typed reads of config fields; every failure names the field it is about."""

    def __init__(self, config: dict, source: str):
        self.config = config
        self.source = source

    def error(self, field: str, problem: str) -> ConfigFieldError:
        return ConfigFieldError(self.source, field, problem)

    def _lookup(self, names: Sequence[str]) -> tuple[str, Any]:
        # The first of the accepted spellings that is present and not null.
        for name in names:
            if self.config.get(name) is not None:
                return name, self.config[name]
        return names[0], _MISSING

    def int(self, *names: str, default: Any = _MISSING, minimum: int = 1) -> int:
        name, value = self._lookup(names)
        if value is _MISSING:
            if default is _MISSING:
                also = f" (also accepted: {', '.join(names[1:])})" if len(names) > 1 else ""
                raise self.error(names[0], f"is missing{also}")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(name, f"must be an integer, got {value!r}")
        if value < minimum:
            raise self.error(name, f"must be {'positive' if minimum == 1 else f'at least {minimum}'}, got {value}")
        maximum = MAX_LAYERS if name in LAYER_FIELDS else MAX_WIDTH
        if value > maximum:
            raise self.error(name, f"must be at most {maximum:,}, got {value:,}")
        return value

    def bool(self, name: builtins.str, default: bool) -> bool:
        value = self.config.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(name, f"must be true or false, got {value!r}")
        return value

    def str(self, *names: builtins.str, default: builtins.str) -> builtins.str:
        name, value = self._lookup(names)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            raise self.error(name, f"must be a string, got {value!r}")
        return value

    def probability(self, *names: builtins.str, default: float = 0.0) -> float:
        name, value = self._lookup(names)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise self.error(name, f"must be a probability in [0, 1), got {value!r}")
        return float(value)

    def int_list(self, name: builtins.str) -> list[builtins.int]:
        value = self.config.get(name) or []
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self.error(name, f"must be a list of layer indices, got {value!r}")
        return value

    def head_dim(self, hidden: builtins.int, heads: builtins.int, heads_field: builtins.str) -> builtins.int:
        """hidden // heads, or an error on the heads field when it does not divide."""
        if hidden % heads:
            raise self.error(heads_field, f"({heads}) does not divide the hidden size ({hidden})")
        return hidden // heads

    def kv_heads(self, heads: builtins.int, default: builtins.int | None, *names: builtins.str) -> builtins.int:
        kv = self.int(*names, default=heads if default is None else default)
        if heads % kv:
            raise self.error(names[0], f"({kv}) must divide the number of attention heads ({heads})")
        return kv


def present_spelling(f: ConfigFields, *names: str) -> str:
    """The spelling of a field this config uses, for error messages."""
    return next((name for name in names if name in f.config), names[0])


def basic_dims(
    f: ConfigFields,
    hidden: tuple[str, ...] = ("hidden_size",),
    layers: tuple[str, ...] = ("num_hidden_layers",),
    heads: tuple[str, ...] = ("num_attention_heads",),
) -> dict[str, int]:
    """hidden_size, num_layers, num_heads, head_dim and vocab_size, under the spellings given."""
    hidden_size, num_heads = f.int(*hidden), f.int(*heads)
    return dict(
        hidden_size=hidden_size,
        num_layers=f.int(*layers),
        num_heads=num_heads,
        head_dim=f.head_dim(hidden_size, num_heads, present_spelling(f, *heads)),
        vocab_size=f.int("vocab_size"),
    )
