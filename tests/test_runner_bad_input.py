"""A user's data, tokenizer or checkpoint that cannot work ends in one line and exit code 2, through `train`.

`train` checks the folder, the data, the tokenizer and the weights before
torchrun starts (backends/runner/preflight.py); the ranks check them again
for runs started by launch.sh, and when a rank is the one to fail under
`train`, the screen shows its one line while torchrun's own report stays in
RUN_DIR/logs/.
"""

from __future__ import annotations

import json
import shutil

import pytest

from scripts.demo_checkpoint import train_tokenizer, write_corpus
from tests.distributed import REPO_ROOT, cpu_env, train_with_warm_ranks
from tests.distributed import cli_in_process as cli
from tests.trained_run import shared_trained_run
from tests.warm_process import run_python

pytestmark = pytest.mark.slow


def one_line_error(completed, fragment):
    lines = completed.stderr.strip().splitlines()
    assert completed.returncode == 2, completed.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], lines


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    return shared_trained_run(tmp_path_factory)


@pytest.fixture(scope="module")
def user(tmp_path_factory, shared):
    """This file's folders, emitted for the shared run's model and text (read, never written here)."""
    return tmp_path_factory.mktemp("bad"), shared.model_dir, shared.corpus


def emit(root, model_dir, name, *extra):
    completed = cli(
        "plan",
        "-m",
        model_dir,
        "--gpu",
        "cpu",
        "--gpus-per-node",
        "2",
        "--seq-len",
        "64",
        "--global-batch",
        "8",
        "--strategies",
        "ddp",
        "--emit",
        root / name,
        *extra,
    )
    return completed


@pytest.fixture(scope="module")
def run_dir(user):
    root, model_dir, corpus = user
    assert emit(root, model_dir, "run", "--data", corpus).returncode == 0
    return root / "run"


def test_a_missing_data_file(user, run_dir):
    one_line_error(cli("train", run_dir, "--data", run_dir / "nowhere.txt"), "nowhere.txt: no such file or folder")
    root, model_dir, _ = user
    one_line_error(emit(root, model_dir, "other", "--data", root / "nowhere.txt"), "no such file or folder")


def test_data_moved_after_emit_is_told_as_the_run_folders_not_as_a_flag_typed(user, tmp_path):
    """The user typed no --data: the line names plan.json as where the path came from and how to point at the new
    place, and `train --data NEW` then passes the checks."""
    root, model_dir, corpus = user
    moved = tmp_path / "corpus.txt"
    shutil.copy(corpus, moved)
    assert emit(tmp_path, model_dir, "run", "--data", moved).returncode == 0
    moved.rename(tmp_path / "elsewhere.txt")
    completed = cli("train", tmp_path / "run")
    one_line_error(completed, "plan.json reads its --data from")
    assert f"{moved}" in completed.stderr and "--data NEW_PATH" in completed.stderr
    assert cli("train", tmp_path / "run", "--data", tmp_path / "elsewhere.txt", "--dry-run").returncode == 0


def test_data_train_would_refuse_is_refused_at_emit_and_nothing_is_written(user, run_dir, tmp_path):
    """A .csv file, or a folder of .txt beside .jsonl, was emitted and refused only later by `train`: emit now
    resolves the pattern as train does (planner/rundir/data_sources.py)."""
    root, model_dir, corpus = user
    (tmp_path / "table.csv").write_text("text\nhello\n")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "a.txt").write_text("hello\n")
    (mixed / "b.jsonl").write_text('{"text": "hello"}\n')
    for data, fragment in (
        (tmp_path / "table.csv", "table.csv: unknown file type '.csv'; use .txt, .jsonl, .json or .parquet"),
        (mixed, "matches files of several kinds (.jsonl, .txt); name one kind per pattern"),
    ):
        one_line_error(emit(root, model_dir, "refused", "--data", data), fragment)
        assert not (root / "refused").exists()
        one_line_error(cli("train", run_dir, "--data", data, "--steps", "1"), fragment)


def test_a_text_field_for_txt_data_is_one_line(user, run_dir):
    """.txt data has no fields: a --text-field given for it would be silently ignored."""
    root, model_dir, corpus = user
    fragment = "--text-field body names a column of .jsonl, .json or .parquet rows, and this run's data is .txt"
    one_line_error(emit(root, model_dir, "field", "--data", corpus, "--text-field", "body"), fragment)
    assert not (root / "field").exists()
    one_line_error(cli("train", run_dir, "--text-field", "body", "--steps", "1"), fragment)


def test_an_empty_corpus(run_dir, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n   \n")
    one_line_error(cli("train", run_dir, "--data", empty, "--steps", "1"), "holds no text")
    # The ranks say the same when they meet it themselves (the runner started without `train`).
    runner = run_python(
        ["-m", "backends.run", "--plan", str(run_dir), "--data", str(empty)], cwd=REPO_ROOT, env=cpu_env(), timeout=300
    )
    one_line_error(runner, "holds no text")


def test_a_rank_that_fails_under_train_shows_its_line_and_torchruns_report_is_logged(run_dir, tmp_path):
    """Too little text for one block is found only by tokenizing it, inside the ranks."""
    short = tmp_path / "short.txt"
    short.write_text("a few words only")
    one_line_error(cli("train", run_dir, "--data", short, "--steps", "1"), "fewer than one block of 64")
    (log,) = sorted((run_dir / "logs").glob("train-*.log"))[-1:]
    assert "ChildFailedError" in log.read_text()  # torchrun's report: kept, off the screen


def test_a_jsonl_file_without_the_text_field(run_dir, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"body": f"document {n}", "id": n}) + "\n" for n in range(50)))
    one_line_error(cli("train", run_dir, "--data", rows, "--steps", "1"), "no 'text' field (it has 'body', 'id')")


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_data_file_that_is_not_what_its_extension_says_is_refused_before_torchrun(run_dir, tmp_path, kind):
    """A .jsonl broken on line 30,000 of 40,000 (MBs past the first documents the check used to read) and a truncated .parquet: one line naming the file and the place, before any rank starts, nothing
    written in the run folder."""
    import datasets

    texts = [f"document {n} " * 5 for n in range(40_000)]
    if kind == "jsonl":
        bad = tmp_path / "rows.jsonl"
        lines = [json.dumps({"text": text}) for text in texts]
        lines[29_999] = lines[29_999][:-5]
        bad.write_text("\n".join(lines) + "\n")
        fragment = "rows.jsonl, line 30000: not JSON"
    else:
        bad = tmp_path / "rows.parquet"
        datasets.Dataset.from_dict({"text": texts}).to_parquet(str(bad))
        bad.write_bytes(bad.read_bytes()[:-100])
        fragment = "rows.parquet: a truncated parquet file"
    before = sorted(path.name for path in run_dir.iterdir())
    one_line_error(cli("train", run_dir, "--data", bad, "--steps", "1"), fragment)
    assert sorted(path.name for path in run_dir.iterdir()) == before


@pytest.mark.parametrize("problem", ["empty", "renamed", "truncated"])
def test_broken_or_empty_data_files_are_refused_at_emit_in_trains_words(user, run_dir, tmp_path, problem):
    """An audit: `plan --emit` wrote a folder for an empty .txt, a text file renamed .parquet and a truncated
    .parquet, which `train` then refused. The bytes that tell (a size, eight magic bytes) are read at emit; the
    reference is train's own line for the same file."""
    import datasets

    root, model_dir, _ = user
    if problem == "empty":
        bad = tmp_path / "empty.txt"
        bad.write_text("")
        fragment = "holds no text (every document is empty)"
    elif problem == "renamed":
        bad = tmp_path / "renamed.parquet"
        bad.write_text("plain text, not a table\n" * 20)
        fragment = "renamed.parquet: not a parquet file (it does not begin with the magic bytes PAR1)"
    else:
        bad = tmp_path / "cut.parquet"
        datasets.Dataset.from_dict({"text": [f"document {n}" for n in range(500)]}).to_parquet(str(bad))
        bad.write_bytes(bad.read_bytes()[:-100])
        fragment = "cut.parquet: a truncated parquet file"
    at_emit = emit(tmp_path, model_dir, "refused", "--data", bad)
    one_line_error(at_emit, fragment)
    assert not (tmp_path / "refused").exists()
    at_train = cli("train", run_dir, "--data", bad, "--steps", "1")
    one_line_error(at_train, fragment)
    assert at_emit.stderr == at_train.stderr


def test_a_tokenizer_bigger_than_the_models_vocabulary(user, run_dir, tmp_path):
    corpus = write_corpus(tmp_path / "other.txt", 500, seed=3)
    train_tokenizer(corpus, tmp_path / "tokenizer")  # then grow it past the model's 320 ids
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tokenizer")
    tokenizer.add_tokens([f"<extra{n}>" for n in range(100)])
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    at_train = cli("train", run_dir, "--tokenizer", tmp_path / "tokenizer", "--steps", "1")
    one_line_error(at_train, "tokens but my-gpt2's vocabulary holds 320")
    # An audit: `plan --emit` wrote the folder for it, which `train` then refused; now in train's words.
    _, model_dir, corpus = user
    at_emit = emit(tmp_path, model_dir, "refused", "--data", corpus, "--tokenizer", tmp_path / "tokenizer")
    assert at_emit.stderr == at_train.stderr and not (tmp_path / "refused").exists()


def test_weights_that_do_not_match_config_json(user):
    root, model_dir, corpus = user
    wrong = root / "wrong-shapes"
    shutil.copytree(model_dir, wrong)
    config = json.loads((wrong / "config.json").read_text())
    config["n_embd"] = 128  # the safetensors hold 64-wide tensors
    (wrong / "config.json").write_text(json.dumps(config))
    assert emit(root, wrong, "wrong", "--data", corpus).returncode == 0
    one_line_error(cli("train", root / "wrong", "--steps", "1"), "the weights do not match config.json")


def test_a_model_folder_gone_since_the_emit_is_named_as_gone(user):
    """The folder moved after `plan --emit`: the lines said it "holds no tokenizer", then "no model.safetensors;
    pass --init random", and followed, a fine-tune became a run from scratch. One line says it is gone; a run
    that reads neither its weights nor its tokenizer (--init random, --tokenizer DIR) still needs nothing of it."""
    root, model_dir, corpus = user
    moved = root / "moved-model"
    shutil.copytree(model_dir, moved)
    assert emit(root, moved, "gone", "--data", corpus).returncode == 0
    assert cli("train", root / "gone", "--dry-run").returncode == 0  # the reference: the folder still there
    shutil.rmtree(moved)
    refused = cli("train", root / "gone", "--dry-run")
    one_line_error(
        refused, f"{moved.resolve()}, the model folder this run was emitted from (plan.json), does not exist"
    )
    assert "holds no" not in refused.stderr and "--init random" not in refused.stderr
    one_line_error(
        cli("train", root / "gone", "--dry-run", "--init", "random"), "does not exist"
    )  # reads its tokenizer
    scratch = cli("train", root / "gone", "--dry-run", "--init", "random", "--tokenizer", model_dir)
    assert scratch.returncode == 0, scratch.stderr


def test_data_for_a_model_without_a_tokenizer(user):
    root, model_dir, corpus = user
    bare = root / "no-tokenizer"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(model_dir / name, bare / name)
    one_line_error(emit(root, bare, "bare", "--data", corpus), "--data needs the model's tokenizer")
    assert emit(root, bare, "bare-run").returncode == 0  # without data: synthetic tokens, fine
    one_line_error(cli("train", root / "bare-run", "--data", corpus), "--data needs the model's tokenizer")


@pytest.fixture(scope="module")
def trained(shared):
    """A folder trained 2 steps on 2 ranks with a checkpoint at each (tests/trained_run.py, shared with
    tests/test_run_folder_faults.py: read only): the corrupted-checkpoint test damages a copy of it (the same
    plan.json: the copy's own checkpoints), the copied-checkpoint test copies its checkpoints into another run
    folder."""
    return shared.run_dir


def test_a_corrupted_checkpoint_names_the_flag_that_starts_afresh(user, trained):
    root, _, _ = user
    run = root / "corrupt"
    shutil.copytree(trained, run)
    shards = [path for path in (run / "checkpoints").rglob("*") if path.is_file() and path.suffix in (".pt", ".distcp")]
    assert shards, sorted((run / "checkpoints").rglob("*"))
    for shard in shards:  # same size, other bytes: only the checksum can tell
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    refused = cli("train", run, "--steps", "3")
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and "Traceback" not in refused.stderr and "Warning" not in refused.stderr, lines
    assert all("is unusable" in line and "trying the previous one" in line for line in lines[:-1]) and len(lines) == 3
    assert lines[-1].startswith("error: no intact checkpoint in ") and "start afresh with --no-resume" in lines[-1]
    fresh = train_with_warm_ranks(run, "--steps", "1", "--no-resume")  # the flag the message names exists and works
    assert fresh.returncode == 0, fresh.stderr[-3000:]


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--record", "--db", "data.csv"], "--db data.csv is not a DuckDB database; pass --db a .duckdb file"),
        (["--record", "--db", "a folder"], "--db a folder is a folder"),
        (["--metrics", "a folder"], "--metrics a folder is a folder"),
        (["--metrics", "/proc/none/metrics.jsonl"], "cannot create /proc/none"),
        (["--metrics", "/proc/metrics.jsonl"], "--metrics: cannot write /proc/metrics.jsonl"),  # root may, /proc not
        (["--metrics", "gone.jsonl"], "gone.jsonl: it links to "),  # open() would follow it into nowhere
    ],
)
def test_a_path_the_run_would_write_is_checked_before_any_rank_starts(run_dir, tmp_path, monkeypatch, extra, fragment):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.csv").write_text("step,loss\n1,2.0\n")
    (tmp_path / "a folder").mkdir()
    (tmp_path / "gone.jsonl").symlink_to(tmp_path / "unmounted" / "metrics.jsonl")
    before = sorted(path.name for path in run_dir.iterdir())
    one_line_error(cli("train", run_dir, "--steps", "1", *extra), fragment)
    assert sorted(path.name for path in run_dir.iterdir()) == before  # no rank started, nothing written
    assert (tmp_path / "data.csv").read_text() == "step,loss\n1,2.0\n"


def test_a_dangling_checkpoints_link_is_one_line(user, tmp_path):
    root, model_dir, corpus = user
    assert emit(root, model_dir, "dangling", "--data", corpus).returncode == 0
    (root / "dangling" / "checkpoints").symlink_to(tmp_path / "unmounted scratch")
    one_line_error(
        cli("train", root / "dangling", "--steps", "1"), "which does not exist; create it, or remove the link"
    )


def test_a_second_run_on_a_folder_being_trained_is_one_line_naming_the_first(run_dir):
    """Through `train` and through the runner as launch.sh starts it: nothing starts, nothing is written."""
    import os

    from backends.runner.run_lock import hold_run_lock

    first = hold_run_lock(run_dir)  # the first run, as `train` holds it
    try:
        before = sorted(path.name for path in run_dir.iterdir())
        one_line_error(cli("train", run_dir, "--steps", "1"), f"is being trained by PID {os.getpid()} on ")
        direct = run_python(
            ["-m", "backends.run", "--plan", str(run_dir), "--steps", "1"], cwd=REPO_ROOT, env=cpu_env(), timeout=300
        )
        one_line_error(direct, "wait for that run to end or stop it")
        assert sorted(path.name for path in run_dir.iterdir()) == before
    finally:
        first.close()


def test_far_more_cpu_processes_than_cores_is_one_line(run_dir):
    import os

    too_many = 4 * (os.cpu_count() or 1) + 1
    one_line_error(cli("train", run_dir, "--nproc", too_many), f"--nproc {too_many}: {too_many} CPU processes")


def test_a_process_count_the_global_batch_does_not_split_over_is_refused_by_the_dry_run(run_dir):
    """--dry-run makes every check a launch makes: --nproc 3 passed it, then failed in the ranks 17 s later
    (the global batch of 8 does not split over 3 ranks). The reference is the ranks' own check
    (backends/runner/world.fit_to_world), whose line `train` now gives before torchrun starts."""
    from backends.runner.folder import load_run_folder
    from backends.runner.world import fit_to_world
    from planner.errors import UserInputError
    from planner.rundir.run_overrides import RunOverrides

    run = load_run_folder(run_dir, RunOverrides()).run
    with pytest.raises(UserInputError) as ranks_say:
        fit_to_world(run, 3, tiny=False, local_world=3)
    one_line_error(cli("train", run_dir, "--nproc", "3", "--dry-run"), f"--nproc 3: {ranks_say.value}")
    assert cli("train", run_dir, "--nproc", "1", "--dry-run").returncode == 0  # 8 splits over 1 rank


def test_skip_step_where_the_norm_comes_after_the_update_is_refused_before_any_rank_starts(user, run_dir):
    """docs/running.md, "Anomalies": the HF Trainer door and DeepSpeed report the norm after their update."""
    one_line_error(
        cli("train", run_dir, "--trainer", "--on-grad-spike", "skip-step"),
        "anomaly action skip-step is not available with the HF Trainer door",
    )
    root, model_dir, corpus = user
    completed = cli(
        "plan", "-m", model_dir, "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "64", "--global-batch", "8",
        "--strategies", "zero2", "--emit", root / "deepspeed", "--data", corpus,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    one_line_error(
        cli("train", root / "deepspeed", "--on-non-finite", "skip-step"),
        "anomaly action skip-step is not available with DeepSpeed",
    )
