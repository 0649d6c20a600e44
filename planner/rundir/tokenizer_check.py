"""The model's tokenizer from a local folder (never the hub), checked against the model: read by `plan --emit`
when the run has data (planner/rundir/write.py) and by the runner (backends/data/prepare.py), so a tokenizer
`train` would refuse is refused before a run folder is written for it, in the same words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.errors import UserInputError

TOKENIZER_FILE_NAMES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "added_tokens.json",
)


def load_checked_tokenizer(folder: str | None, *, model_name: str, vocab_size: int) -> Any:
    """The model's tokenizer from a local folder, checked against the model's vocabulary."""
    if not folder:
        raise UserInputError(
            f"{model_name} has no local tokenizer to read --data with; pass --tokenizer DIR "
            "(a folder written by tokenizer.save_pretrained)"
        )
    path = Path(folder)
    if not any((path / name).is_file() for name in TOKENIZER_FILE_NAMES):
        raise UserInputError(
            f"{path} holds no tokenizer (tokenizer.json or tokenizer_config.json); pass --tokenizer DIR"
        )
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError) as error:
        raise UserInputError(f"{path}: the tokenizer cannot be loaded ({str(error).splitlines()[0][:200]})") from None
    if len(tokenizer) > vocab_size:
        raise UserInputError(
            f"the tokenizer in {path} has {len(tokenizer)} tokens but {model_name}'s vocabulary holds "
            f"{vocab_size}; use the model's own tokenizer (--tokenizer)"
        )
    if tokenizer.eos_token_id is None:
        raise UserInputError(
            f"the tokenizer in {path} has no EOS token to separate documents; "
            "set eos_token in its tokenizer_config.json"
        )
    return tokenizer
