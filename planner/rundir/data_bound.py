"""The most tokens a run's --data can give, bounded without tokenizing, so `plan --emit` refuses a folder whose
data cannot fill one step's global batch (which `train` would refuse only after tokenizing it all).

The bound is sound for the tokenizers our runs read data with (byte-level BPE: GPT-2's, Llama 3's; SentencePiece
with or without byte fallback: Llama 2's) as long as their normalizer does not lengthen text (none of these
does): every token stands for at least one byte of UTF-8 text, or one character, which is at least one byte. On
top of the text, backends/data/encode.py adds per document the tokenizer's own special tokens (BOS, say) and one
EOS, and a SentencePiece tokenizer may add a word-start marker as a token of its own at the start of each piece
it is given. So

    tokens <= text bytes + documents x (special tokens + EOS + 1) + pieces beyond a document's first

- A .txt file is read as UTF-8 with universal newlines: its text is at most its bytes; each document (a
  paragraph, a line or the file) but the last ends at a newline, so documents <= newlines + 1.
- A .jsonl file holds one row per line (documents <= newlines + 1), and JSON spells a string in at least its
  UTF-8 bytes (an escape is longer than the character it stands for), so the text is at most the file's bytes.
- A document is cut into pieces of at most 65,536 characters, each cut in a piece's last half
  (backends/data/pieces.py, which the planner does not import): at most one piece more per 32,768 bytes.

A .json array, a .parquet file (compressed, dictionary-encoded) or a saved dataset has no bound this cheap, and is
left to `train`, which counts its blocks exactly (backends/data/prepare.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.errors import UserInputError
from planner.rundir.data_sources import Source, resolve_sources

PIECE_CUT_MIN_CHARS = 1 << 15  # half of backends/data/pieces.py's MAX_PIECE_CHARS: the shortest piece but a last
READ_BYTES = 1 << 20


def special_tokens_per_document(tokenizer: Any) -> int:
    """The tokenizer's own special tokens around one text (BOS, CLS/SEP, ...), as encode.py frames a document."""
    with_specials = tokenizer("a", add_special_tokens=True)["input_ids"]
    without = tokenizer("a", add_special_tokens=False)["input_ids"]
    return max(0, len(with_specials) - len(without))


def token_upper_bound(sources: list[Source], per_document: int, needed: int) -> int | None:
    """At most how many tokens the sources give (see the module docstring), or None when some source has no
    cheap bound, or when their bytes alone reach `needed` (the bound could not be below it: nothing is read)."""
    if any(not (source.kind == "text" or source.path.suffix.lower() == ".jsonl") for source in sources):
        return None
    sizes = [source.path.stat().st_size for source in sources]
    if sum(sizes) >= needed:
        return None
    bound = 0
    for source, size in zip(sources, sizes, strict=True):
        documents = _newlines(source.path) + 1
        bound += size + documents * per_document + size // PIECE_CUT_MIN_CHARS
    return bound


def check_data_fills_a_step(
    patterns: list[str], tokenizer: Any, *, global_batch: int, seq_len: int, data_parallel: int = 1
) -> None:
    """One line, before anything is written, when --data certainly holds fewer tokens than one step's global
    batch: `train` would refuse the folder, and it cannot change the batch. The line names the largest
    --global-batch the bound allows that the plan's data-parallel ranks split evenly (or a shorter --seq-len
    when not even one sequence per rank fits)."""
    needed = global_batch * seq_len
    sources = resolve_sources(patterns, "--data")
    per_document = special_tokens_per_document(tokenizer) + 2  # + EOS + a word-start marker
    bound = token_upper_bound(sources, per_document, needed)
    if bound is None or bound >= needed:
        return
    size = sum(source.path.stat().st_size for source in sources)
    fits = bound // seq_len // data_parallel * data_parallel  # every data-parallel rank gets its share
    shortest = bound // data_parallel  # the longest sequence each rank can get one of
    if fits:  # a flag's value without thousands separators, to be typed as it is
        advice = f"plan again with --global-batch {fits} or less (or a smaller --seq-len), or add data"
    elif shortest >= 2:
        advice = f"plan again with --seq-len {shortest} or less and --global-batch {data_parallel}, or add data"
    else:
        advice = f"add data: the plan's {data_parallel} data-parallel ranks need a sequence each"

    raise UserInputError(
        f"--data {' '.join(patterns)} holds at most {bound:,} tokens ({size:,} bytes of text, a token at least one "
        f"byte, plus {per_document} per document for EOS and special tokens: planner/rundir/data_bound.py), fewer "
        f"than one step's global batch of {global_batch:,} x {seq_len:,} tokens; {advice}"
    )


def _newlines(path: Path) -> int:
    count = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(READ_BYTES):
            count += chunk.count(b"\n") + chunk.count(b"\r")  # universal newlines: a lone \r ends a line too
    return count
