"""`hardware-selector plan --emit DIR` (and --report) from the command line: the folder written, where it cannot
be, what is refused before the search, the files' modes and the FSDP sharding a pinned plan writes. The folder's
contents against the plan are tests/test_emit_*.py's."""

from __future__ import annotations

import json
import subprocess

import pytest

from benchmarks_db.store import BenchmarkStore
from hardware_selector_cli.app import main
from tests.db_samples import sample_record
from tests.test_plan_cli import PLAN_ARGS, _json


@pytest.mark.parametrize("folder", ["", "   "])
def test_an_empty_emit_folder_is_one_line_and_writes_nothing(capsys, tmp_path, monkeypatch, folder):
    """An empty --emit path once meant the current folder, where --force replaced the user's own files."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("mine\n")
    assert main([*PLAN_ARGS, "--emit", folder, "--force"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --emit is empty; give it a value, or leave it out") and "\n" not in err
    assert [path.name for path in tmp_path.iterdir()] == ["README.md"] and (
        tmp_path / "README.md"
    ).read_text() == "mine\n"


def test_plan_emit_writes_the_best_plans_run_folder_and_refuses_to_overwrite(tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = [
        "plan",
        "--model",
        "gpt2",
        "--gpu",
        "A100-40GB",
        "--gpus-per-node",
        "2",
        "--seq-len",
        "512",
        "--global-batch",
        "8",
        "--json",
        "--emit",
        str(run_dir),
    ]
    assert main(argv) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    written = json.loads((run_dir / "plan.json").read_text())
    assert written["config"] == best["config"] and (run_dir / "launch.sh").exists()
    assert main(argv) == 2  # the folder exists now
    assert "--force" in capsys.readouterr().err
    assert main([*argv, "--force"]) == 0


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("/proc/hardware-selector-run", "--emit: cannot write /proc/hardware-selector-run/plan.json: "),
        ("file/run", "is a file, not a folder"),
        ("gone", "links to "),  # a link to nothing: the run would be made wherever it points
        ("/proc/page.html", "--report: cannot write /proc/page.html: "),
    ],
)
def test_plan_output_where_it_cannot_be_written_is_one_line_before_the_search(
    tmp_path, capsys, monkeypatch, where, message
):
    """--emit and --report were refused only after the search, behind the notes it prints (a read-only benchmark
    database's); they are checked first now, so the line is the only one."""
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "gone").symlink_to(tmp_path / "unmounted" / "runs")
    database = tmp_path / "shared.duckdb"
    BenchmarkStore(database).add(sample_record())
    (tmp_path / "shared.duckdb.lock").unlink()
    (tmp_path / "shared.duckdb.lock").mkdir()  # read-only: reading it prints a note first
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(database))
    target = where if where.startswith("/") else str(tmp_path / where)
    flag = "--report" if where.endswith(".html") else "--emit"
    argv = ["plan", "--model", "gpt2", "--gpu", "A100-40GB", "--gpus-per-node", "2", "--seq-len", "512"]
    assert main([*argv, flag, target]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: ") and message in error and "\n" not in error, error
    assert not (tmp_path / "unmounted").exists()


def test_emitted_files_get_the_umask_mode_not_a_private_one(tmp_path, capsys):
    from planner.files import file_mode

    argv = ["plan", "--model", "gpt2", "--gpu", "A100-40GB", "--gpus-per-node", "2", "--seq-len", "512"]
    assert main([*argv, "--emit", str(tmp_path / "run")]) == 0
    modes = {path.name: path.stat().st_mode & 0o777 for path in (tmp_path / "run").iterdir()}
    assert modes["plan.json"] == file_mode() == 0o666 & ~current_umask()
    assert modes["launch.sh"] == file_mode(executable=True)


def current_umask() -> int:
    """The umask, read the way a shell's `umask` reports it (in a child, so this process's stays untouched)."""
    return int(subprocess.check_output(["sh", "-c", "umask"], text=True).strip(), 8)


@pytest.mark.parametrize(
    ("sharding", "nodes", "expected"),
    [
        ("full", 1, {"fsdp_version": 2, "fsdp_reshard_after_forward": True}),  # FSDP2's FULL_SHARD
        ("grad-op", 1, {"fsdp_version": 2, "fsdp_reshard_after_forward": False}),  # FSDP2's SHARD_GRAD_OP
        ("no-shard", 1, {"fsdp_version": 1, "fsdp_sharding_strategy": "NO_SHARD"}),
        ("hybrid", 2, {"fsdp_version": 1, "fsdp_sharding_strategy": "HYBRID_SHARD"}),
    ],
)
def test_a_pinned_fsdp_sharding_is_what_plan_emit_writes(tmp_path, capsys, sharding, nodes, expected):
    """Seed 004's FSDP chapter: FULL_SHARD for a small model, which speed alone ranks below no-shard and grad-op.
    `--strategies fsdp --fsdp-sharding S` narrows the search as `--strategies fsdp-S` does, and the emitted
    accelerate config runs S (accelerate's FSDP keys for each sharding)."""
    import yaml

    argv = ["plan", "--model", "gpt2", "--gpu", "A100-80GB", "--gpus-per-node", "2", "--nodes", str(nodes),
            "--global-batch", "32", "--seq-len", "1024", "--strategies", "fsdp"]  # fmt: skip
    if sharding == "full":
        assert _json(capsys, [*argv, "--json"])["best"]["config"]["fsdp_sharding"] != "full"  # what ranks best
    assert main([*argv, "--fsdp-sharding", sharding, "--emit", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    accelerate = yaml.safe_load((tmp_path / "run" / "accelerate_config.yaml").read_text())
    assert accelerate["distributed_type"] == "FSDP"
    assert {key: accelerate["fsdp_config"].get(key) for key in expected} == expected
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert plan["config"]["fsdp_sharding"] == {"no-shard": "none"}.get(sharding, sharding)


def test_an_emit_path_with_a_file_in_the_way_says_so(tmp_path, capsys):
    # Both said "choose a writable location with free space" (an audit): the place was writable, a file was in it.
    (tmp_path / "ft").mkdir()
    (tmp_path / "ft" / "plan.json").write_text("{}")
    (tmp_path / "notes").write_text("")
    argv = ["plan", "--model", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--strategies", "ddp", "--emit"]
    for where, message in (
        (
            tmp_path / "ft" / "plan.json",
            f"--emit {tmp_path / 'ft' / 'plan.json'} is a file, and --emit names a run folder; ",
        ),
        (tmp_path / "notes" / "run", f"{tmp_path / 'notes'} is a file, not a folder; move that file aside or choose "),
    ):
        assert main([*argv, str(where)]) == 2
        error = capsys.readouterr().err.strip()
        assert message in error and "free space" not in error and "\n" not in error, error
    assert (tmp_path / "ft" / "plan.json").read_text() == "{}" and (tmp_path / "notes").read_text() == ""


@pytest.mark.parametrize("adapters", [["--lora-rank", "16"], ["--lora-rank", "16", "--qlora"]])
def test_a_lora_plan_is_refused_at_emit_not_trained_as_a_full_fine_tune(tmp_path, capsys, adapters):
    """A LoRA plan is sized for adapters (llama-3-8b on one A100-40GB), but every runner and door trains every
    weight: its folder trained a full fine-tune without a word. Planned only, as FP8 is; nothing is written."""
    argv = ["plan", "--model", "llama-3-8b", "--gpu", "A100-40GB", "--gpus-per-node", "1", *adapters]
    assert main(argv) == 0  # planned
    capsys.readouterr()
    assert main([*argv, "--emit", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: ")
    assert "is planned, not emitted: a run folder trains every weight" in err and "PEFT" in err
    assert not (tmp_path / "run").exists()
