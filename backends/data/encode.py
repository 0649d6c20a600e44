"""A corpus's documents as one token stream: each document's tokens, framed once by the tokenizer's own
special tokens, then one EOS.

`DocumentTokens` takes the batches of pieces the reader gives (pieces.py). A
document that is one piece is encoded as the tokenizer encodes it
(`tokenizer(text)["input_ids"]`, BOS and all). A longer one's pieces are
encoded without special tokens, and the tokenizer's leading special tokens
go before its first piece and its trailing ones after its last: a tokenizer
that adds a BOS per call gets one per document, not one per piece. Both
frames are read off one text encoded with and without special tokens. The
EOS that separates documents is added unless the tokenizer's own trailing
tokens end with it already (one EOS per document either way).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from backends.data.pieces import Piece


def batch_encoder(tokenizer: Any, *, add_special_tokens: bool) -> Callable[[list[str]], list[list[int]]]:
    """The token ids of a batch of texts, as `tokenizer(texts)["input_ids"]` gives them.

    A fast tokenizer's call runs its Rust backend's encode_batch, then spends about as long again turning
    each result into dicts (offsets, masks, special-token flags) that a token file never keeps. A copy of
    the backend, set as transformers sets it for such a call (no truncation, no padding, special tokens
    split or not as the tokenizer says), gives the same ids: a token file's whole write is 1.2x faster
    (docs/performance.md). Its encode_batch_fast (tokenizers 0.20 and later) leaves out the character
    offsets as well, which ids do not need: a quarter less CPU again. The first batch is encoded both ways,
    and a tokenizer class that adds behaviour of its own in Python (so the two differ) keeps transformers'
    call for the whole file; so does a tokenizer without a Rust backend. tests/test_data_pipeline.py
    compares the two, with a tokenizer.json that asks for truncation and padding.
    """

    def through_transformers(texts: list[str]) -> list[list[int]]:
        return tokenizer(
            texts, add_special_tokens=add_special_tokens, return_attention_mask=False, return_token_type_ids=False
        )["input_ids"]

    rust = getattr(tokenizer, "backend_tokenizer", None)
    if rust is None:
        return through_transformers
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(rust.to_str())  # a copy: the caller's tokenizer keeps its settings
    backend.no_truncation()
    backend.no_padding()
    backend.encode_special_tokens = bool(getattr(tokenizer, "split_special_tokens", False))

    encode_batch = getattr(backend, "encode_batch_fast", backend.encode_batch)  # offsets left at zero

    def through_backend(texts: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in encode_batch(texts, add_special_tokens=add_special_tokens)]

    chosen: Callable[[list[str]], list[list[int]]] | None = None

    def encode(texts: list[str]) -> list[list[int]]:
        nonlocal chosen
        if chosen is not None:
            return chosen(texts)
        expected = through_transformers(texts)
        chosen = through_backend if through_backend(texts) == expected else through_transformers
        return expected

    return encode


def special_frame(with_specials: list[int], without: list[int]) -> tuple[list[int], list[int]] | None:
    """(leading, trailing) special tokens: what `with_specials` holds around `without`; None if it does not."""
    if not without:
        return None  # an empty text shows no place between the two
    for start in range(len(with_specials) - len(without) + 1):
        if with_specials[start : start + len(without)] == without:
            return with_specials[:start], with_specials[start + len(without) :]
    return None


class DocumentTokens:
    """The token ids of batches of pieces, documents framed and separated as the module docstring says."""

    def __init__(self, tokenizer: Any, eos_id: int):
        self.with_specials = batch_encoder(tokenizer, add_special_tokens=True)
        self.without = batch_encoder(tokenizer, add_special_tokens=False)
        self.eos_id = eos_id
        self.leading: list[int] | None = None
        self.trailing: list[int] = []
        self.closing = [eos_id]  # after a document's last token

    def _learn_frame(self, pieces: list[Piece]) -> None:
        for piece in pieces:
            frame = special_frame(self.with_specials([piece.text])[0], self.without([piece.text])[0])
            if frame is not None:
                break
        else:
            return  # nothing tokenized yet: the next batch shows the frame
        self.leading, self.trailing = frame
        self.closing = [] if self.trailing[-1:] == [self.eos_id] else [self.eos_id]

    def __call__(self, pieces: list[Piece]) -> list[int]:
        if self.leading is None:
            self._learn_frame(pieces)
        whole_texts = [piece.text for piece in pieces if piece.whole]
        part_texts = [piece.text for piece in pieces if not piece.whole]
        whole = iter(self.with_specials(whole_texts) if whole_texts else [])
        parts = iter(self.without(part_texts) if part_texts else [])
        joined: list[int] = []
        for piece in pieces:
            if piece.whole:
                joined += next(whole)
            else:
                joined += (self.leading or []) if piece.first else []
                joined += next(parts)
                joined += self.trailing if piece.last else []
            if piece.last:
                joined += self.closing
        return joined
