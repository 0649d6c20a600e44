"""`plan --emit --data` refuses data that certainly cannot fill one step's global batch (train cannot change the
batch, and refused such a folder only after tokenizing it), and train's own refusal says how to plan again.

References: the bound computed by hand from the module's rule (planner/rundir/data_bound.py: text bytes +
documents x (special tokens + 2) + bytes // 32,768), checked to hold against the corpus tokenized document by
document with an EOS after each (backends/data/encode.py); train's exact block count from prepare_data itself.
"""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main
from planner.contract.run_config import DataConfig
from planner.errors import UserInputError
from scripts.demo_checkpoint import make_local_gpt2

SEQ = 64


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    root = tmp_path_factory.mktemp("bound")
    model_dir, corpus = make_local_gpt2(root, layers=1)
    documents = corpus.read_text().split("\n\n")
    jsonl = root / "corpus.jsonl"
    jsonl.write_text("".join(json.dumps({"text": text}) + "\n" for text in documents))
    return root, model_dir, corpus, jsonl, documents


def _emit(model_dir, data, folder, global_batch: int, gpus: int = 1) -> int:
    return main(["plan", "-m", str(model_dir), "--gpu", "cpu", "--gpus-per-node", str(gpus), "--seq-len", str(SEQ),
                 "--global-batch", str(global_batch), "--strategies", "ddp", "--data", str(data),
                 "--emit", str(folder)])  # fmt: skip


@pytest.mark.parametrize("kind", ["txt", "jsonl"])
def test_data_too_small_for_one_step_is_refused_at_emit_naming_the_batch_that_fits(user, capsys, kind):
    root, model_dir, corpus, jsonl, documents = user
    data = corpus if kind == "txt" else jsonl
    raw = data.read_bytes()
    bound = len(raw) + (raw.count(b"\n") + 1) * 2 + len(raw) // 32768  # no BOS: EOS + a word-start marker
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    real = sum(len(tokenizer(text)["input_ids"]) + 1 for text in documents)  # as encode.py packs them
    assert real <= bound  # the bound is sound for this corpus
    too_big = bound // SEQ + 1
    assert _emit(model_dir, data, root / f"refused-{kind}", too_big) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --data "), captured.err
    assert f"holds at most {bound:,} tokens" in lines[0]
    assert f"plan again with --global-batch {bound // SEQ} or less" in lines[0]  # one GPU: no rounding
    assert not (root / f"refused-{kind}").exists()  # nothing written
    assert _emit(model_dir, data, root / f"fits-{kind}", bound // SEQ) == 0  # the batch it names is emitted


def test_the_batch_named_is_split_evenly_by_the_data_parallel_ranks(user, capsys):
    root, model_dir, corpus, _, _ = user
    raw = corpus.read_bytes()
    bound = len(raw) + (raw.count(b"\n") + 1) * 2 + len(raw) // 32768
    even = bound // SEQ // 3 * 3  # DDP on 3 ranks
    assert _emit(model_dir, corpus, root / "refused-dp3", bound // SEQ + 3, gpus=3) == 2
    assert f"plan again with --global-batch {even} or less" in capsys.readouterr().err
    assert _emit(model_dir, corpus, root / "fits-dp3", even, gpus=3) == 0


class _NoSpecials:
    """A tokenizer that frames a document with nothing: the bound's per-document term is EOS + 1."""

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": [0] * len(text)}


def test_data_too_small_for_one_sequence_per_rank_names_a_seq_len_or_asks_for_data(tmp_path):
    """Not one sequence per data-parallel rank: the advice is a shorter --seq-len with one sequence per rank, or
    more data when not even that can be (the advice had read '--seq-len 0 or less')."""
    from planner.rundir.data_bound import check_data_fills_a_step

    text = tmp_path / "a.txt"
    text.write_text("some text\n")  # 10 bytes, 2 documents: at most 10 + 2 x 2 = 14 tokens
    with pytest.raises(UserInputError) as caught:
        check_data_fills_a_step([str(text)], _NoSpecials(), global_batch=32, seq_len=32, data_parallel=2)
    assert "holds at most 14 tokens" in str(caught.value)
    assert "plan again with --seq-len 7 or less and --global-batch 2, or add data" in str(caught.value)
    with pytest.raises(UserInputError) as caught:
        check_data_fills_a_step([str(text)], _NoSpecials(), global_batch=16, seq_len=32, data_parallel=16)
    assert str(caught.value).endswith("add data: the plan's 16 data-parallel ranks need a sequence each")


def test_trains_refusal_names_the_batch_the_blocks_fill_and_how_to_plan_again(user, tmp_path):
    from backends.data import prepare_data

    _, model_dir, corpus, _, _ = user
    options = dict(data=DataConfig(train=[str(corpus)]), tokenizer_dir=str(model_dir), model_name="m", seq_len=SEQ,
                   vocab_size=320, local_rank=0, seed=0)  # fmt: skip
    blocks = len(prepare_data(**options, run_dir=tmp_path, global_batch=1).train)  # type: ignore[arg-type]
    with pytest.raises(UserInputError) as refused:
        prepare_data(**options, run_dir=tmp_path, global_batch=blocks + 1)  # type: ignore[arg-type]
    message = str(refused.value)
    assert f"the data give {blocks:,} training blocks of {SEQ} tokens" in message
    assert message.endswith(
        f"add data, or plan the folder again (hardware-selector plan ... --emit {tmp_path} --force) with "
        f"--global-batch {blocks}, or a multiple of 1 below it, or a smaller --seq-len"
    )
    # On data-parallel ranks the batch advised is one they split (a new user's audit: 9 on 2 ranks plans nothing);
    # with fewer blocks than ranks, shorter blocks, one per rank (data_bound.py's rule at emit).
    for ranks, advice in (
        (2, f"--global-batch {blocks // 2 * 2}, or a multiple of 2 below it"),
        (blocks + 1, f"--seq-len {blocks * SEQ // (blocks + 1)} or less and --global-batch {blocks + 1}"),
    ):
        with pytest.raises(UserInputError) as refused:
            prepare_data(**options, run_dir=tmp_path, global_batch=2 * blocks + 2, data_parallel=ranks)  # type: ignore[arg-type]
        assert advice in str(refused.value), str(refused.value)
