"""A run's data: local text tokenized with the model's tokenizer and cut into blocks, or synthetic tokens.

`prepare_data(run, run_dir, ...)` is what the runner calls on every rank. It
resolves the data files, loads the tokenizer from a local folder (never the
hub), checks it against the model, has one rank per node tokenize into the
cached token file (token_cache.py) and returns the training blocks and the
held-out evaluation blocks (`--eval-data`, or a seeded fraction of the
training blocks). Every bad input is a one-line UserInputError.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.data.blocks import Blocks, split_blocks
from backends.data.synthetic import SyntheticTokens
from backends.data.token_cache import content_key, open_tokens, prepare_token_file, token_dtype, write_token_file
from planner.contract.run_config import DataConfig
from planner.errors import UserInputError
from planner.rundir.data_sources import Source, no_text_message, resolve_sources
from planner.rundir.tokenizer_check import TOKENIZER_FILE_NAMES
from planner.rundir.tokenizer_check import load_checked_tokenizer as load_tokenizer

SYNTHETIC_SAMPLES = 1 << 16


@dataclass
class RunData:
    train: Any  # a map-style dataset of token blocks
    eval: Any | None
    train_tokens: int  # tokens in the training blocks (one epoch)
    description: str
    tokenizer_dir: Path | None = None


def tokenizer_files(folder: Path) -> list[Path]:
    return [folder / name for name in TOKENIZER_FILE_NAMES if (folder / name).is_file()]


def tokenized_blocks(
    sources: list[Source],
    data: DataConfig,
    tokenizer: Any,
    tokenizer_dir: Path,
    *,
    cache_dir: Path,
    seq_len: int,
    vocab_size: int,
    builder: bool,
    label: str,
) -> Blocks:
    options = {"text_field": data.text_field, "text_unit": data.text_unit, "add_special_tokens": True}
    key = content_key(sources, tokenizer_files(tokenizer_dir), options)
    dtype = token_dtype(vocab_size)

    def build(bin_path: Path) -> dict[str, Any]:
        return write_token_file(
            bin_path,
            sources,
            tokenizer,
            text_field=data.text_field,
            text_unit=data.text_unit,
            eos_id=tokenizer.eos_token_id,
            dtype=dtype,
        )

    bin_path, meta = prepare_token_file(cache_dir, key, build, builder=builder, label=label)
    blocks = Blocks(open_tokens(bin_path, meta), seq_len)
    if meta["documents"] == 0:
        raise UserInputError(no_text_message(label, sources))
    if len(blocks) == 0:
        raise UserInputError(
            f"{label} has {meta['tokens']} tokens, fewer than one block of {seq_len}; add data or lower --seq-len"
        )
    return blocks


def prepare_data(
    data: DataConfig,
    *,
    run_dir: Path,
    tokenizer_dir: str | None,
    model_name: str,
    seq_len: int,
    vocab_size: int,
    global_batch: int,
    local_rank: int,
    seed: int,
    data_parallel: int = 1,
) -> RunData:
    """The run's training and evaluation blocks (see the module docstring). `data_parallel`: the ranks a step's
    batch is split over, so a batch the data fill is advised as a multiple of it."""
    if data.synthetic:  # no eval either: DataConfig refuses --eval-data without --data
        train = SyntheticTokens(max(SYNTHETIC_SAMPLES, global_batch), seq_len, vocab_size, seed=seed)
        return RunData(
            train=train, eval=None, train_tokens=len(train) * seq_len, description="synthetic tokens (no --data)"
        )
    sources = resolve_sources(data.train, "--data")
    eval_sources = resolve_sources(data.eval, "--eval-data") if data.eval else []
    tokenizer = load_tokenizer(tokenizer_dir, model_name=model_name, vocab_size=vocab_size)
    folder = Path(tokenizer_dir or "")
    cache_dir = run_dir / "data"
    common = dict(cache_dir=cache_dir, seq_len=seq_len, vocab_size=vocab_size, builder=local_rank == 0)
    blocks = tokenized_blocks(sources, data, tokenizer, folder, label=", ".join(data.train), **common)
    if eval_sources:
        train = blocks
        held_out: Blocks | None = tokenized_blocks(
            eval_sources, data, tokenizer, folder, label=", ".join(data.eval), **common
        )
    else:
        train, held_out = split_blocks(blocks, data.eval_fraction, data.eval_max_blocks, data.seed)
    if len(train) < global_batch:
        # A batch the data fill that every data-parallel rank gets its share of (planner/rundir/data_bound.py's
        # rule, which emit applies before the tokens are counted); too few blocks for that: shorter ones.
        fits = len(train) // data_parallel * data_parallel
        shortest = len(train) * seq_len // data_parallel
        again = f"plan the folder again (hardware-selector plan ... --emit {run_dir} --force) with"
        if fits:
            advice = f"{again} --global-batch {fits}, or a multiple of {data_parallel} below it, or a smaller --seq-len"
        elif shortest:
            advice = f"{again} --seq-len {shortest} or less and --global-batch {data_parallel}"
        else:
            advice = f"the plan's {data_parallel} data-parallel ranks need a block each"
        raise UserInputError(
            f"the data give {len(train):,} training blocks of {seq_len:,} tokens, fewer than one step's "
            f"global batch of {global_batch:,}; add data, or {advice}"
        )
    evaluation = f"{len(held_out)} evaluation blocks" if held_out is not None else "no evaluation split"
    return RunData(
        train=train,
        eval=held_out,
        train_tokens=len(train) * seq_len,
        tokenizer_dir=folder,
        description=f"{len(train)} training blocks of {seq_len} tokens, {evaluation}",
    )
