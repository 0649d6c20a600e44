"""A data file that is not what its extension says is one line naming the file, the line or row, and what was
expected: at `train`'s check before torchrun (check_source) and where the ranks read (iter_documents).

References: the files are written here, so the line at fault and the bytes are known; pyarrow's own messages
(several lines, naming neither) are what the one line replaces.
"""

from __future__ import annotations

import json

import pytest

from backends.data.documents import iter_documents
from backends.data.file_checks import check_source
from planner.errors import UserInputError
from planner.rundir.data_sources import resolve_sources

GOOD_ROWS = [{"text": f"document {n} says hello", "id": n} for n in range(5)]


def rows(*lines: str) -> str:
    return "".join(line + "\n" for line in lines)


def good(count: int) -> list[str]:
    return [json.dumps(row) for row in GOOD_ROWS[:count]]


def parquet_bytes(tmp_path) -> bytes:
    import datasets

    datasets.Dataset.from_dict({"text": [f"row {n} " * 50 for n in range(200)]}).to_parquet(str(tmp_path / "p.parquet"))
    return (tmp_path / "p.parquet").read_bytes()


def through_check(path):
    (source,) = resolve_sources([str(path)])
    check_source(source.path, source.kind, "text")


def through_reader(path):
    for _ in iter_documents(resolve_sources([str(path)]), text_field="text", text_unit="paragraph"):
        pass


CASES = {
    "a line that is not JSON": (
        "bad.jsonl",
        lambda tmp: rows(*good(2), '{"text": "unfinished', *good(2)),
        "bad.jsonl, line 3: not JSON (Unterminated string",
    ),
    "a later line without the text field": (
        "bad.jsonl",
        lambda tmp: rows(*good(3), json.dumps({"body": "elsewhere"}), *good(1)),
        "bad.jsonl, line 4: no 'text' field (it has 'body')",
    ),
    "a line whose text is a number": (
        "bad.jsonl",
        lambda tmp: rows(*good(1), json.dumps({"text": 7}), *good(2)),
        "bad.jsonl, line 2: the 'text' field holds int, not text",
    ),
    "a line that is an array": (
        "bad.jsonl",
        lambda tmp: rows(*good(1), "", json.dumps(["a", "b"])),
        "bad.jsonl, line 3: an array where a JSON object with a 'text' field was expected",
    ),
    "a .json array broken on its fourth line": (
        "bad.json",
        lambda tmp: '[\n  {"text": "one"},\n  {"text": "two"},\n  {"text": "three",,}\n]\n',
        "bad.json, line 4, column 20: not JSON (Expecting property name",
    ),
    "a CSV named .parquet": (
        "table.parquet",
        lambda tmp: "text,id\nhello,1\n",
        "table.parquet: not a parquet file (it does not begin with the magic bytes PAR1)",
    ),
    "a parquet file cut short": (
        "cut.parquet",
        lambda tmp: parquet_bytes(tmp)[:-300],
        "cut.parquet: a truncated parquet file",
    ),
    "a parquet file whose footer is garbage": (
        "footer.parquet",
        lambda tmp: parquet_bytes(tmp)[:-40] + b"\x00" * 36 + b"PAR1",
        "footer.parquet: a damaged parquet footer",
    ),
}


@pytest.mark.parametrize("door", [through_check, through_reader], ids=["before-torchrun", "in-the-ranks"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_file_that_is_not_what_its_extension_says_is_one_line_naming_the_place(tmp_path, capfd, case, door):
    name, content, expected = CASES[case]
    data = content(tmp_path)
    (tmp_path / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    capfd.readouterr()
    with pytest.raises(UserInputError) as caught:
        door(tmp_path / name)
    message = str(caught.value)
    assert "\n" not in message and str(tmp_path / name) in message and expected in message, message
    assert "Failed to load" not in capfd.readouterr().err  # datasets' own report of pyarrow's message: not shown


def test_well_formed_files_pass_both_doors(tmp_path):
    (tmp_path / "fine.jsonl").write_text(rows(*good(5), ""))
    (tmp_path / "fine.parquet").write_bytes(parquet_bytes(tmp_path))
    (tmp_path / "fine.json").write_text(json.dumps(GOOD_ROWS, indent=2))
    for path in ("fine.jsonl", "fine.parquet", "fine.json"):
        through_check(tmp_path / path)
        through_reader(tmp_path / path)


@pytest.mark.parametrize("name", ["empty.jsonl", "empty.json"])
def test_a_zero_byte_json_file_holds_no_documents_not_a_traceback(tmp_path, name):
    """datasets' reader ended a 0-byte .jsonl in a bare StopIteration, a RuntimeError inside our generator:
    `train --data empty.jsonl` printed a traceback. It reads as no rows, which train refuses in one line."""
    (tmp_path / name).write_bytes(b"")
    (source,) = resolve_sources([str(tmp_path / name)])
    assert list(iter_documents([source], text_field="text", text_unit="paragraph")) == []


def test_a_parquet_column_that_is_missing_or_not_text_is_named_before_torchrun(tmp_path):
    import datasets

    datasets.Dataset.from_dict({"body": ["a", "b"], "text": [1, 2]}).to_parquet(str(tmp_path / "t.parquet"))
    with pytest.raises(UserInputError, match="t.parquet: the 'text' field holds int64, not text"):
        through_check(tmp_path / "t.parquet")
    (source,) = resolve_sources([str(tmp_path / "t.parquet")])
    with pytest.raises(UserInputError, match=r"no 'content' field \(it has 'body', 'text'\)"):
        check_source(source.path, source.kind, "content")


def test_an_evaluation_set_without_training_data_is_refused_at_emit(tmp_path, capsys):
    """`plan --emit --eval-data` without --data was emitted and trained on synthetic tokens; only the ranks'
    data preparation refused it, after torchrun had started them. The run contract refuses it (DataConfig)."""
    from hardware_selector_cli.app import main

    (tmp_path / "eval.txt").write_text("held out text\n")
    argv = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "32", "--global-batch", "4",
            "--strategies", "ddp", "--emit", str(tmp_path / "run"), "--eval-data", str(tmp_path / "eval.txt")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "--eval-data needs --data" in err and "\n" not in err, err
    assert not (tmp_path / "run").exists()


def test_a_data_link_to_nothing_is_named_as_a_link(tmp_path):
    """glob matches a dangling link, so `--data corpus.jsonl` (a link to an unmounted disk) passed every
    pattern check and failed reading "/mnt/.../corpus.jsonl: cannot be read", not saying it was a link."""
    (tmp_path / "corpus.jsonl").symlink_to(tmp_path / "unmounted" / "corpus.jsonl")
    with pytest.raises(UserInputError, match=r"--data .*corpus.jsonl links to .*unmounted.*, which does not exist"):
        resolve_sources([str(tmp_path / "corpus.jsonl")])


def test_a_missing_text_field_is_refused_at_emit_not_first_at_train(tmp_path):
    """Rows whose text is under 'body' were emitted into a run folder that `train` then refused; emit reads
    each file's first row (or parquet schema) and refuses in the words train uses (the reference: the same
    file's line from check_source), and the same data with --text-field body emits."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from planner.contract.run_config import DataConfig
    from planner.rundir.write import RunOptions, emit_run_folder
    from scripts.demo_checkpoint import make_local_gpt2
    from tests.emit_plans import make_plan

    model_dir, _ = make_local_gpt2(tmp_path / "user")
    # A step the rows fill (a larger one is refused at emit as too little data: planner/rundir/data_bound.py).
    plan = make_plan(str(model_dir), gpus_per_node=1, strategy="ddp", seq_len=32, micro_batch=2)
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text(rows(*(json.dumps({"body": row["text"]}) for row in GOOD_ROWS)))
    pq.write_table(pa.table({"body": [row["text"] for row in GOOD_ROWS]}), tmp_path / "rows.parquet")
    for path in (jsonl, tmp_path / "rows.parquet"):
        with pytest.raises(UserInputError) as train_says:
            through_check(path)
        with pytest.raises(UserInputError) as emit_says:
            emit_run_folder(
                plan, tmp_path / f"run-{path.suffix[1:]}", options=RunOptions(data=DataConfig(train=[str(path)]))
            )
        assert str(emit_says.value) == str(train_says.value) and "--text-field" in str(emit_says.value)
        assert "no 'text' field (it has 'body')" in str(emit_says.value)
        assert not (tmp_path / f"run-{path.suffix[1:]}").exists()
        data = DataConfig(train=[str(path)], text_field="body")
        assert emit_run_folder(plan, tmp_path / f"body-{path.suffix[1:]}", options=RunOptions(data=data))
