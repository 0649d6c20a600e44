"""Write the trained model as an HF folder: config.json, safetensors weights and the tokenizer's files.

    RUN_DIR/final/    config.json, model.safetensors (or shards + model.safetensors.index.json),
                      tokenizer files and the chat template beside them, the checkpoint's
                      generation_config.json, hardware_selector_export.json (step, eval loss, strategy)

`AutoModelForCausalLM.from_pretrained(RUN_DIR/final)` loads it. The adapter
gathers the full weights onto rank 0 (from its ZeRO shards, FSDP shards or
tensor/pipeline slices); rank 0 writes a new folder beside the old one and
swaps it in, so a reader sees the previous export or the new one, never half
of it. Tied tensors (a head tied to the embedding) are written once, as save_pretrained does.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from backends.ranks import barrier, rank
from planner.progress import WorkProgress

SHARD_BYTES = 5 * 2**30
# Beside the tokenizer's files: its chat template (transformers 5 saves it apart, older ones as JSON); beside the
# model's: its generation defaults (sampling, the EOS list). A fine-tuned chat model lost both (an audit).
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
MODEL_FILES = ("generation_config.json",)


def export_hf_folder(
    adapter: Any,
    config: Any,
    folder: Path,
    *,
    tied: dict[str, str],
    tokenizer_dir: Path | None,
    facts: dict[str, Any],
    model_dir: Path | None = None,
) -> Path | None:
    """Collective: every rank helps gather; rank 0 writes `folder`. Returns it on rank 0."""
    state = adapter.full_state_dict()
    written = None
    if rank() == 0:
        assert state is not None
        for target, source in tied.items():  # written once, as save_pretrained does; loaders tie them again
            if target in state and source in state and _same(state[target], state[source]):
                del state[target]
        partial = folder.with_name(f".{folder.name}.partial")
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
        dtypes = {str(tensor.dtype).removeprefix("torch.") for tensor in state.values()}
        config.dtype = dtypes.pop() if len(dtypes) == 1 else "float32"
        config.save_pretrained(str(partial))
        write_weights(partial, state)
        if tokenizer_dir is not None:
            _copy_tokenizer(tokenizer_dir, partial)
        if model_dir is not None:
            _copy_files(model_dir, partial, MODEL_FILES)
        (partial / "hardware_selector_export.json").write_text(json.dumps(facts, indent=1), encoding="utf-8")
        _swap_in(partial, folder)
        written = folder
    barrier()
    return written


def _same(a: Any, b: Any) -> bool:
    import torch

    return a.data_ptr() == b.data_ptr() or (a.shape == b.shape and torch.equal(a, b))


def write_weights(folder: Path, state: dict[str, Any]) -> None:
    """model.safetensors, or shards of at most SHARD_BYTES with HF's index file."""
    from safetensors.torch import save_file

    tensors = {name: tensor.detach().contiguous().cpu() for name, tensor in state.items()}
    shards: list[dict[str, Any]] = [{}]
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    metadata = {"format": "pt"}
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    if len(shards) == 1:
        save_file(shards[0], str(folder / "model.safetensors"), metadata=metadata)
        return
    weight_map = {}
    with WorkProgress("writing the weights", total=total, unit="B") as progress:
        for number, shard in enumerate(shards, 1):
            name = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
            save_file(shard, str(folder / name), metadata=metadata)
            weight_map.update({key: name for key in shard})
            progress.advance(sum(t.numel() * t.element_size() for t in shard.values()), note=name)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1), encoding="utf-8")


def _copy_tokenizer(source: Path, destination: Path) -> None:
    from backends.data.prepare import TOKENIZER_FILE_NAMES

    _copy_files(source, destination, (*TOKENIZER_FILE_NAMES, *CHAT_TEMPLATE_FILES))


def _copy_files(source: Path, destination: Path, names: tuple[str, ...]) -> None:
    for name in names:
        if (source / name).is_file():
            shutil.copy2(source / name, destination / name)


def _swap_in(partial: Path, folder: Path) -> None:
    old = folder.with_name(f".{folder.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if folder.exists():
        os.replace(folder, old)
    os.replace(partial, folder)
    if old.exists():
        shutil.rmtree(old)
