"""The runner's data: every accepted format reads the same documents, the token cache is keyed by content,
blocks are the packed documents, and the order resumes exactly however the global batch is split.

References: the documents as written by the test, tokenized one by one with the same tokenizer (EOS after
each); the stream's order for one split of the global batch against another.
"""

from __future__ import annotations

import json

import pytest

from backends.data import Blocks, micro_batches, prepare_data
from backends.data.documents import iter_documents
from planner.contract.run_config import DataConfig
from planner.errors import UserInputError
from planner.rundir.data_sources import resolve_sources
from scripts.demo_checkpoint import train_tokenizer, write_corpus

DOCUMENTS = [f"document number {n} says " + " ".join(["tokens"] * (n % 7 + 1)) for n in range(60)]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    train_tokenizer(write_corpus(root / "corpus.txt", 400), root / "tokenizer")
    return root / "tokenizer"


def documents_of(patterns, **options):
    """The documents read, each put together from its pieces."""
    documents = []
    for batch in iter_documents(
        resolve_sources(patterns),
        text_field=options.get("text_field", "text"),
        text_unit=options.get("text_unit", "paragraph"),
    ):
        for piece in batch:
            if piece.first:
                documents.append("")
            documents[-1] += piece.text
    return documents


def prepared(config, run_dir, tokenizer_dir, seq_len=16):
    """The run data of `config` for a model of the test tokenizer's 320 ids, on one rank."""
    return prepare_data(
        config,
        run_dir=run_dir,
        tokenizer_dir=str(tokenizer_dir),
        model_name="m",
        seq_len=seq_len,
        vocab_size=320,
        global_batch=2,
        local_rank=0,
        seed=0,
    )


def test_every_format_reads_the_same_documents(tmp_path):
    import datasets

    (tmp_path / "docs.txt").write_text("\n\n".join(DOCUMENTS))
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"body": text, "n": 1}) + "\n" for text in DOCUMENTS))
    table = datasets.Dataset.from_dict({"text": DOCUMENTS})
    table.to_parquet(str(tmp_path / "docs.parquet"))
    table.save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict({"train": table}).save_to_disk(str(tmp_path / "saved_dict"))
    assert documents_of([str(tmp_path / "docs.txt")]) == DOCUMENTS
    assert documents_of([str(tmp_path / "docs.jsonl")], text_field="body") == DOCUMENTS
    assert documents_of([str(tmp_path / "docs.parquet")]) == DOCUMENTS
    assert documents_of([str(tmp_path / "saved")]) == DOCUMENTS
    assert documents_of([str(tmp_path / "saved_dict")]) == DOCUMENTS
    # A glob, in sorted order; a .txt file read a line or a whole file at a time.
    (tmp_path / "parts").mkdir()
    for index in range(3):
        (tmp_path / "parts" / f"part{index}.txt").write_text("\n\n".join(DOCUMENTS[index * 20 : (index + 1) * 20]))
    assert documents_of([str(tmp_path / "parts" / "*.txt")]) == DOCUMENTS
    assert documents_of([str(tmp_path / "parts" / "part0.txt")], text_unit="document") == ["\n\n".join(DOCUMENTS[:20])]
    assert documents_of([str(tmp_path / "docs.txt")], text_unit="line") == DOCUMENTS


@pytest.mark.parametrize(
    "content, fragment",
    [
        ({"name.csv": "a,b"}, "unknown file type '.csv'"),
        ({"rows.jsonl": json.dumps({"text": 3}) + "\n"}, "holds int, not text"),
        ({"rows.jsonl": "{not json\n"}, "rows.jsonl, line 1: not JSON (Expecting property name"),
    ],
)
def test_a_file_that_cannot_be_read_is_one_line(tmp_path, content, fragment):
    for name, text in content.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(UserInputError, match=fragment.replace("(", r"\(")) as caught:
        documents_of([str(tmp_path / name) for name in content])
    assert "\n" not in str(caught.value)


def test_blocks_are_the_documents_packed_with_eos_and_the_cache_follows_the_content(tmp_path, tokenizer_dir):
    from transformers import AutoTokenizer

    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n\n".join(DOCUMENTS))
    config = DataConfig(train=[str(corpus)], eval_fraction=0.0)

    def prepare():
        return prepared(config, tmp_path / "run", tokenizer_dir)

    data = prepare()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    expected = [token for text in DOCUMENTS for token in (*tokenizer(text)["input_ids"], tokenizer.eos_token_id)]
    packed = [int(token) for index in range(len(data.train)) for token in data.train[index]]
    assert packed == expected[: len(packed)] and len(expected) - len(packed) < 16  # only the ragged tail dropped
    cached = sorted((tmp_path / "run" / "data").glob("tokens-*.bin"))
    assert len(cached) == 1
    prepare()  # unchanged content: the same file, not tokenized again
    assert sorted((tmp_path / "run" / "data").glob("tokens-*.bin")) == cached
    assert (
        cached[0].stat().st_mtime_ns == sorted((tmp_path / "run" / "data").glob("tokens-*.bin"))[0].stat().st_mtime_ns
    )
    cached[0].write_bytes(cached[0].read_bytes()[:-6])  # a truncated cache (a full disk, a killed copy)
    again = prepare()  # tokenized again, not mapped short
    assert [int(token) for index in range(len(again.train)) for token in again.train[index]] == packed
    damaged = bytearray(cached[0].read_bytes())
    damaged[0] ^= 0xFF  # same size, other bytes
    cached[0].write_bytes(bytes(damaged))
    assert [int(token) for index in range(len(prepare().train)) for token in prepare().train[index]] == packed
    corpus.write_text("\n\n".join(reversed(DOCUMENTS)))  # same size, other content: a new key
    prepare()
    assert len(list((tmp_path / "run" / "data").glob("tokens-*.bin"))) == 2


def test_the_held_out_split_is_seeded_and_disjoint_from_training(tmp_path, tokenizer_dir):
    corpus = write_corpus(tmp_path / "corpus.txt", 800)
    config = DataConfig(train=[str(corpus)], eval_fraction=0.05, eval_max_blocks=7)
    data = prepared(config, tmp_path / "run", tokenizer_dir, seq_len=32)
    train = {data.train.block_number(i) for i in range(len(data.train))}
    held = {data.eval.block_number(i) for i in range(len(data.eval))}
    assert len(held) == 7 and not train & held and len(train | held) == data.train.total


def test_a_step_consumes_the_same_samples_however_the_global_batch_is_split():
    import torch

    tokens = torch.arange(64 * 4).numpy()
    blocks = Blocks(tokens, 4)  # 64 blocks; block i starts with 4 * i
    global_batch = 8

    def steps(micro, world, start=0, count=5):
        streams = [
            micro_batches(
                blocks, micro_batch=micro, rank=r, world=world, start_sample=start, seed=3, global_batch=global_batch
            )
            for r in range(world)
        ]
        accumulation = global_batch // (micro * world)
        result = []
        for _ in range(count):
            taken = [next(stream) for _ in range(accumulation) for stream in streams]
            result.append(sorted(int(batch[row, 0]) // 4 for batch in taken for row in range(batch.shape[0])))
        return result

    reference = steps(micro=2, world=2)  # 2 ranks x 2 micro-batches of 2
    assert steps(micro=1, world=1) == reference and steps(micro=8, world=1) == reference
    assert steps(micro=2, world=4, start=3 * global_batch, count=2) == reference[3:]  # resumed at step 3, 4 ranks
    assert len(set(block for step in steps(micro=2, world=2, count=8) for block in step)) == 64  # one epoch: all


def test_a_separate_evaluation_set_is_tokenized_on_its_own(tmp_path, tokenizer_dir):
    train = write_corpus(tmp_path / "train.txt", 300, seed=1)
    held = write_corpus(tmp_path / "held.txt", 60, seed=2)
    data = prepared(DataConfig(train=[str(train)], eval=[str(held)]), tmp_path / "run", tokenizer_dir, seq_len=32)
    assert data.train.indices is None  # nothing held out of the training text
    assert len(list((tmp_path / "run" / "data").glob("tokens-*.bin"))) == 2 and 0 < len(data.eval) < len(data.train)


def test_the_token_file_encoder_gives_transformers_ids_whatever_the_tokenizer_json_asks(tmp_path, tokenizer_dir):
    """Token files are encoded by the fast tokenizer's Rust backend directly (backends/data/encode.py);
    the reference is transformers' own call. A tokenizer.json that truncates and pads, as some shipped ones
    do, must not cut or pad a document, and the caller's tokenizer keeps its settings."""
    import shutil

    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    from backends.data.encode import batch_encoder

    folder = tmp_path / "truncating"
    shutil.copytree(tokenizer_dir, folder)
    backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
    backend.enable_truncation(max_length=8)
    backend.enable_padding(length=12)
    backend.save(str(folder / "tokenizer.json"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    texts = [*DOCUMENTS, "", "a longer document that runs on " * 20]
    with_special, without = (batch_encoder(tokenizer, add_special_tokens=flag) for flag in (True, False))
    assert tokenizer.backend_tokenizer.truncation is not None  # the encoders changed only their own copies
    assert with_special(texts) == tokenizer(texts)["input_ids"]
    assert without(texts) == tokenizer(texts, add_special_tokens=False)["input_ids"]
    assert max(map(len, with_special(texts))) > 12 and min(map(len, with_special(texts))) < 8


def test_a_tokenizer_that_adds_python_behaviour_keeps_transformers_call(tokenizer_dir):
    """A tokenizer class whose call differs from its Rust backend (here: one that appends a token in Python)
    is noticed on the first batch, and every batch then goes through its own call."""
    from transformers import AutoTokenizer

    from backends.data.encode import batch_encoder

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    original = type(tokenizer).__call__

    class Appending(type(tokenizer)):  # type: ignore[misc]
        def __call__(self, *args, **kwargs):
            encoded = original(self, *args, **kwargs)
            encoded["input_ids"] = [[*ids, 7] for ids in encoded["input_ids"]]
            return encoded

    tokenizer.__class__ = Appending
    encode = batch_encoder(tokenizer, add_special_tokens=True)
    first, second = encode(DOCUMENTS[:5]), encode(DOCUMENTS[5:9])
    assert first == tokenizer(DOCUMENTS[:5])["input_ids"] and second == tokenizer(DOCUMENTS[5:9])["input_ids"]
    assert all(ids[-1] == 7 for ids in first + second)


def test_an_empty_data_pattern_or_one_of_mixed_kinds_is_one_line(tmp_path, monkeypatch):
    """`--data ''` would be the current folder (a virtual environment's JSON files included); a folder of text
    beside configs would train on both."""
    from planner.rundir.run_overrides import resolve_data_paths

    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text("some text\n")
    (tmp_path / "config.json").write_text('{"text": "not a corpus"}\n')
    for pattern in ("", "  "):
        with pytest.raises(UserInputError, match="--data is empty"):
            resolve_sources([pattern])
        with pytest.raises(UserInputError, match="--data is empty"):
            resolve_data_paths([pattern], "--data")
    with pytest.raises(UserInputError, match=r"matches files of several kinds \(\.json, \.txt\)"):
        resolve_sources([str(tmp_path)])
    assert [source.kind for source in resolve_sources([str(tmp_path / "*.txt")])] == ["text"]


def test_files_a_token_cache_was_written_from_are_not_read_again_until_they_change(tmp_path, tokenizer_dir):
    """`train` reads every line of a .jsonl before torchrun (backends/data/file_checks.py), once: a token
    file of the run written from it since it last changed shows it was read whole."""
    import os

    from backends.data.token_cache import sources_read_before

    corpus = tmp_path / "rows.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"the quick brown fox {n} " * 20}) + "\n" for n in range(100)))
    cache = tmp_path / "run" / "data"
    assert sources_read_before(cache, "text") == set()
    prepared(DataConfig(train=[str(corpus)], eval_fraction=0.0), tmp_path / "run", tokenizer_dir)
    assert sources_read_before(cache, "text") == {corpus.resolve()}
    assert sources_read_before(cache, "body") == set()  # read for another field: no proof
    later = os.stat(next(cache.glob("tokens-*.json"))).st_mtime_ns + 10**9
    os.utime(corpus, ns=(later, later))  # edited after the token file was written
    assert sources_read_before(cache, "text") == set()
