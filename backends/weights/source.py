"""Read a local HF checkpoint's tensors, or only the slices a rank holds, without loading the rest.

A WeightSource opens `model.safetensors` or a sharded checkpoint
(`model.safetensors.index.json` and its shards). safetensors reads slices
straight from disk, so a rank that holds rows 1000-1999 of a tensor reads
those rows only; a flat range of a tensor (ZeRO partitions) reads the rows
that cover it. Never pickle: a folder with only `pytorch_model.bin` is
refused, with the one-liner that converts it.

Names: the model's parameter names are found in the checkpoint as they are,
or without / with the base-model prefix (a `GPT2Model` checkpoint loaded into
`GPT2LMHeadModel`); a head tied to the embedding may be absent and is read
from the embedding; an MoE layer's fused experts are assembled from the
checkpoint's per-expert matrices (backends/weights/expert_checkpoints.py). A missing tensor or a shape that differs from the
config's is a one-line UserInputError.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.weights.expert_checkpoints import fused_expert_keys, renamed_key
from planner.errors import UserInputError

if TYPE_CHECKING:
    import torch
    from torch import nn

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"


class WeightSource:
    def __init__(self, folder: str | Path, *, base_prefix: str = "", tied: dict[str, str] | None = None):
        self.folder = Path(folder)
        self.base_prefix = f"{base_prefix}." if base_prefix else ""
        self.tied = tied or {}  # parameter name -> the name it is tied to (head -> embedding)
        self.files = self._weight_map()
        self._handles: dict[str, Any] = {}

    def _weight_map(self) -> dict[str, Path]:
        index, single = self.folder / INDEX, self.folder / SINGLE
        if index.is_file():
            try:
                mapping = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            except (ValueError, KeyError, TypeError):
                raise UserInputError(f"{index} is not a safetensors index (no weight_map)") from None
            missing = sorted({name for name in mapping.values() if not (self.folder / name).is_file()})
            if missing:
                raise UserInputError(f"{self.folder}: shard {missing[0]} listed in {INDEX} is missing")
            return {key: self.folder / name for key, name in mapping.items()}
        if single.is_file():
            from safetensors import safe_open

            try:
                with safe_open(str(single), framework="pt") as handle:
                    names = handle.keys()  # safe_open is not a dict: keys() is its API
                return {key: single for key in names}
            except Exception as error:  # safetensors raises its own error type for a damaged header
                raise UserInputError(f"{single} is not a readable safetensors file ({error})") from None
        if (self.folder / "pytorch_model.bin").is_file():
            raise UserInputError(
                f"{self.folder} holds only pytorch_model.bin (pickle, not loaded for safety); convert "
                "it once with `model.save_pretrained(DIR, safe_serialization=True)`"
            )
        raise UserInputError(f"{self.folder} holds no model.safetensors; pass --init random to train from scratch")

    def _handle(self, path: Path) -> Any:
        from safetensors import safe_open

        key = str(path)
        if key not in self._handles:
            self._handles[key] = safe_open(key, framework="pt")
        return self._handles[key]

    def key_for(self, name: str) -> str:
        """The checkpoint key holding parameter `name`."""
        candidates = [name]
        if self.base_prefix and name.startswith(self.base_prefix):
            candidates.append(name[len(self.base_prefix) :])
        elif self.base_prefix:
            candidates.append(self.base_prefix + name)
        for candidate in candidates:
            if candidate in self.files:
                return candidate
            renamed = renamed_key(candidate, self.files)
            if renamed is not None:
                return renamed
            if fused_expert_keys(candidate, self.files):
                return candidate  # assembled from per-expert matrices (read, shape)
        if name in self.tied:
            return self.key_for(self.tied[name])
        raise UserInputError(
            f"the checkpoint in {self.folder} has no tensor '{name}'; it does not match its "
            "config.json (or was saved from another model)"
        )

    def _stored_shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._handle(self.files[key]).get_slice(key).get_shape())

    def shape(self, name: str) -> tuple[int, ...]:
        key = self.key_for(name)
        experts = fused_expert_keys(key, self.files) if key not in self.files else None
        if experts:
            first = [self._stored_shape(part) for part in experts[0]]
            return (len(experts), sum(rows for rows, _ in first), first[0][1])
        return self._stored_shape(key)

    def check_shape(self, name: str, expected: tuple[int, ...]) -> None:
        found = self.shape(name)
        if found != tuple(expected):
            raise UserInputError(
                f"checkpoint tensor '{self.key_for(name)}' in {self.folder} has shape {list(found)} "
                f"but the config gives {list(expected)}; the weights do not match config.json"
            )

    def read(self, name: str, index: tuple[slice, ...] | None = None) -> torch.Tensor:
        """The tensor (or the slice `index` of it) as stored."""
        key = self.key_for(name)
        experts = fused_expert_keys(key, self.files) if key not in self.files else None
        if experts:  # one layer's experts: stacked, each its matrices' rows in order
            import torch

            whole = torch.stack([torch.cat([self.read(part) for part in parts]) for parts in experts])
            return whole[index] if index is not None else whole
        piece = self._handle(self.files[key]).get_slice(key)
        return piece[index] if index is not None else piece[:]

    def read_flat(self, name: str, start: int, end: int) -> torch.Tensor:
        """Elements [start, end) of the flattened tensor, reading only the rows that hold them."""
        shape = self.shape(name)
        if not shape:
            return self.read(name).reshape(-1)[start:end]
        row = 1
        for size in shape[1:]:
            row *= size
        first, last = start // row, -(-end // row)
        rows = self.read(name, (slice(first, last),)).reshape(-1)
        return rows[start - first * row : end - first * row]


def tied_names(model: nn.Module) -> dict[str, str]:
    """{tied parameter: the one it shares}, from transformers' own table (a head tied to the embedding, BERT's
    decoder bias, T5's per-stack embeddings). A checkpoint written by save_pretrained holds only the sources."""
    table = getattr(model, "_tied_weights_keys", None)
    if isinstance(table, dict):
        return {str(target): str(source) for target, source in table.items()}
    if not getattr(model.config, "tie_word_embeddings", False):
        return {}
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    if head is None or embedding is None:
        return {}
    names = {id(module): name for name, module in model.named_modules()}
    head_name, embedding_name = names.get(id(head)), names.get(id(embedding))
    if head_name is None or embedding_name is None:
        return {}
    return {f"{head_name}.weight": f"{embedding_name}.weight"}


def source_for(model: nn.Module, folder: str | Path) -> WeightSource:
    return WeightSource(folder, base_prefix=getattr(model, "base_model_prefix", ""), tied=tied_names(model))
