"""Documents as pieces of bounded length, so a document of any size is read and tokenized in flat memory.

A 50 MB `.txt` without a newline is one document; read whole and handed to
the tokenizer whole it took minutes and gigabytes. Here a document longer
than MAX_PIECE_CHARS is cut into pieces, each marked as its document's first
and/or last, and the token writer (encode.py) frames the pieces with the
tokenizer's special tokens once per document, so the token stream is the
document's own.

Cuts fall at whitespace when the last half of a piece has any: just before
the last whitespace character of a run that a non-whitespace character
follows. A byte-level BPE pre-tokenizer (GPT-2's, Llama 3's) ends a
pre-token there, and BPE never merges across pre-tokens, so the pieces'
tokens are exactly the whole document's (tests/test_long_documents.py). A
piece without such whitespace is cut at the bound; only there may the tokens
differ from the whole document's, and only at the cut.

`split_stream` reads a text file's chunks and cuts them into documents at a
separator ("\\n\\n" for paragraphs, "\\n" for lines, none for a whole file),
holding at most one piece plus one chunk. A document of whitespace only is
no document (as before); a document's leading whitespace beyond one piece
is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import NamedTuple

MAX_PIECE_CHARS = 1 << 16  # a few MB of the tokenizer's working memory, whatever the document's length
# Searched in the reversed text: a non-whitespace character, then an ASCII whitespace character before it.
_CUT = re.compile(r"\S[ \t\n\r\f\v]")


class Piece(NamedTuple):
    text: str
    first: bool  # the document's first piece: the tokenizer's leading special tokens go before it
    last: bool  # its last piece: the trailing special tokens and the EOS go after it

    @property
    def whole(self) -> bool:
        return self.first and self.last


def cut_point(text: str, start: int, limit: int) -> int:
    """Where a piece of at most `limit` characters starting at `start` ends (see the module docstring)."""
    end = start + limit
    low = start + max(1, limit // 2)
    window = text[low : end + 2][::-1]  # characters low .. end+1, last first
    found = _CUT.search(window)
    if found is None:
        return end
    return low + len(window) - 2 - found.start()  # the whitespace character's index: the next piece starts there


class _Document:
    """The pieces of one document as its text arrives; `held` is the part not yet cut (at most one piece)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.started = False  # its first piece has been given
        self.held = ""

    def cut(self, text: str) -> Iterator[Piece]:
        """Pieces off the front of `text` while more than one piece of it remains; the rest is held."""
        position = 0
        while len(text) - position > self.limit:
            cut = cut_point(text, position, self.limit)
            piece = text[position:cut]
            if self.started or piece.strip():
                yield Piece(piece, not self.started, False)
                self.started = True
            position = cut
        self.held = text[position:]

    def end(self, text: str) -> Iterator[Piece]:
        """The pieces of the document's last part `text`, the last one marked; then the next document begins."""
        yield from self.cut(text)
        if self.started or self.held.strip():
            yield Piece(self.held, not self.started, True)
        self.started, self.held = False, ""


def pieces_of(text: str, limit: int = MAX_PIECE_CHARS) -> Iterator[Piece]:
    """A document held in memory (a row of a .jsonl or .parquet file) as pieces; none when it is blank."""
    if len(text) <= limit:  # nearly every document: one piece, no copy
        if text.strip():
            yield Piece(text, True, True)
        return
    yield from _Document(limit).end(text)


def split_stream(chunks: Iterable[str], separator: str | None, limit: int = MAX_PIECE_CHARS) -> Iterator[Piece]:
    """The pieces of the documents of a text read a chunk at a time, documents separated by `separator`.

    The same documents as `text.split(separator)` without the blank ones, whatever the chunks' sizes:
    the part after the last separator seen is held until the next chunk, and cut into pieces while it
    is longer than `limit` (a cut never splits a separator: the held part contains none)."""
    document = _Document(limit)
    for chunk in chunks:
        tail = document.held + chunk
        if separator is not None and separator in tail:
            *complete, tail = tail.split(separator)
            for text in complete:
                yield from document.end(text)
        yield from document.cut(tail)
    yield from document.end(document.held)
