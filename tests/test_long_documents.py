"""A document of any length is read and tokenized in pieces, in flat memory, with the tokens of the whole.

References: each document tokenized whole by the same tokenizer (its BOS and EOS included) for the token
stream; the documents as written for the reader; `text.split(separator)` for the streaming splitter;
Python's own allocation count (tracemalloc, not time) for the reader's memory.
"""

from __future__ import annotations

import random
import tracemalloc

import numpy as np
import pytest

from backends.data import encode
from backends.data.documents import iter_documents
from backends.data.pieces import MAX_PIECE_CHARS, split_stream
from backends.data.token_cache import write_token_file
from planner.rundir.data_sources import resolve_sources
from scripts.demo_checkpoint import WORDS, write_corpus

# Words and the whitespace between them, as prose has it: runs of spaces, tabs, single newlines, punctuation.
VOCABULARY = [*WORDS, "naïve", "日本語", "12345", "don't", "(x)", "—"]
GAPS = [" "] * 24 + ["  ", "   ", "\t", " \t", "\n", ", ", ". ", " \n  "]


def prose(length: int, seed: int) -> str:
    rng = random.Random(seed)
    parts, size = [], 0
    while size < length:
        word = rng.choice(VOCABULARY) + rng.choice(GAPS)
        parts.append(word)
        size += len(word)
    return "".join(parts).strip()


def byte_level_tokenizer(root, template: str | None):
    """A byte-level BPE trained here (no hub); `template` is the post-processor's, e.g. '<s> $A </s>'."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    corpus = write_corpus(root / "corpus.txt", 400)
    backend = Tokenizer(models.BPE(unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train([str(corpus)], trainer)
    if template:
        specials = [(name, backend.token_to_id(name)) for name in ("<s>", "</s>") if name in template]
        backend.post_processor = processors.TemplateProcessing(single=template, special_tokens=specials)
    PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>").save_pretrained(root / "tok")
    return AutoTokenizer.from_pretrained(root / "tok")


def token_file(tmp_path, files, tokenizer, text_unit="paragraph"):
    meta = write_token_file(
        tmp_path / "tokens.bin",
        resolve_sources([str(path) for path in files]),
        tokenizer,
        text_field="text",
        text_unit=text_unit,
        eos_id=tokenizer.eos_token_id,
        dtype="uint16",
    )
    return np.fromfile(tmp_path / "tokens.bin", dtype=np.uint16).astype(int).tolist(), meta


@pytest.mark.parametrize(
    "template, adds_eos",
    [(None, False), ("<s> $A", False), ("<s> $A </s>", True)],
    ids=["gpt2-style", "bos-per-call", "bos-and-eos-per-call"],
)
def test_the_pieces_of_a_long_document_give_the_whole_documents_tokens(tmp_path, template, adds_eos):
    """A byte-level BPE ends a pre-token where the cut falls, so the stream is exactly each whole document's
    tokens; the BOS a tokenizer adds per call comes once per document, and so does the EOS."""
    tokenizer = byte_level_tokenizer(tmp_path, template)
    bos, eos = tokenizer.convert_tokens_to_ids("<s>"), tokenizer.eos_token_id
    documents = [prose(5 * MAX_PIECE_CHARS + 123, seed=1), "a short one", prose(3 * MAX_PIECE_CHARS, seed=2)]
    corpus = tmp_path / "long.txt"
    corpus.write_text("\n\n".join(documents), encoding="utf-8")
    written, meta = token_file(tmp_path, [corpus], tokenizer)
    whole = [tokenizer(text)["input_ids"] + ([] if adds_eos else [eos]) for text in documents]
    assert written == [token for ids in whole for token in ids]
    assert meta["documents"] == 3 and written.count(eos) == 3
    assert written.count(bos) == (3 if template else 0)


def test_a_document_without_whitespace_is_cut_at_the_bound_and_framed_once(tmp_path):
    """No whitespace to cut at: the tokens may differ from the whole document's at the cuts only, so the
    text they decode to is the document's, with one BOS and one EOS."""
    tokenizer = byte_level_tokenizer(tmp_path, "<s> $A </s>")
    text = "".join(random.Random(3).choice("abcdefgh") for _ in range(3 * MAX_PIECE_CHARS + 7))
    (tmp_path / "solid.txt").write_text(text)
    written, _ = token_file(tmp_path, [tmp_path / "solid.txt"], tokenizer, text_unit="document")
    assert written[0] == tokenizer.convert_tokens_to_ids("<s>") and written[-1] == tokenizer.eos_token_id
    assert written.count(tokenizer.eos_token_id) == 1 and written.count(written[0]) == 1
    assert tokenizer.decode(written, skip_special_tokens=True) == text


def test_the_tokenizer_is_handed_bounded_pieces_of_a_document_of_several_megabytes(tmp_path, monkeypatch):
    """The 50 MB one-line file of issue 33 took 9.3 GB in the tokenizer: here the largest text the
    tokenizer ever receives is one piece, and together the pieces are the document."""
    tokenizer = byte_level_tokenizer(tmp_path, "<s> $A </s>")
    text = prose(3 * 2**20, seed=4).replace("\n", " ")
    (tmp_path / "one line.txt").write_text(text)
    handed: list[str] = []
    real = encode.batch_encoder

    def spying(tok, *, add_special_tokens):
        inner = real(tok, add_special_tokens=add_special_tokens)
        return lambda texts: (handed.extend(texts), inner(texts))[1]

    monkeypatch.setattr(encode, "batch_encoder", spying)
    written, meta = token_file(tmp_path, [tmp_path / "one line.txt"], tokenizer)
    assert max(map(len, handed)) <= MAX_PIECE_CHARS and len(handed) > 3 * 2**20 // MAX_PIECE_CHARS
    assert meta["documents"] == 1 and written.count(tokenizer.eos_token_id) == 1
    assert tokenizer.decode(written, skip_special_tokens=True) == text


def test_reading_a_huge_single_line_holds_a_few_chunks_not_the_line(tmp_path):
    """Python's allocations while the reader goes through a 24 MB line: a bounded few MB (the reader used
    to hold the whole line, and split it again at every chunk)."""
    path = tmp_path / "huge.txt"
    path.write_text("word " * (24 * 2**20 // 5))
    tracemalloc.start()
    try:
        pieces = [len(piece.text) for batch in iter_documents(resolve_sources([str(path)]), text_field="text",
                                                              text_unit="paragraph") for piece in batch]  # fmt: skip
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(pieces) == path.stat().st_size  # one document, every character of it
    assert max(pieces) <= MAX_PIECE_CHARS and peak < path.stat().st_size / 2


@pytest.mark.parametrize("separator", ["\n\n", "\n", None])
def test_the_streaming_splitter_gives_the_documents_of_split_whatever_the_chunks(separator):
    rng = random.Random(5)
    alphabet = ["a", "b", " ", "\n", "\n", "xyz", "  ", "\t"]
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        limit, chunk = rng.randint(2, 25), rng.randint(1, 40)
        documents: list[str] = []
        current: str | None = None
        for piece in split_stream([text[i : i + chunk] for i in range(0, len(text), chunk)], separator, limit):
            assert len(piece.text) <= limit and piece.first == (current is None)
            current = (current or "") + piece.text
            if piece.last:
                documents.append(current)
                current = None
        expected = [part for part in (text.split(separator) if separator else [text]) if part.strip()]
        assert current is None and len(documents) == len(expected)
        for got, wanted in zip(documents, expected, strict=True):  # leading blanks past one piece may be dropped
            assert wanted.endswith(got) and not wanted[: len(wanted) - len(got)].strip()
