"""Flags beside `tune RUN_DIR` are applied or refused by whether the user gave them, not by whether their value
differs from the default (hardware_selector_cli/given_flags.py). Found by a review: `--objective` beside RUN_DIR
was dropped (the search kept plan.json's objective), a flag at its default value was ignored without a word, and
on an elastic folder `--strategies` naming no family whose checkpoints reshard was silently widened to those that do.
Trials are stood in for by tests/test_tune_run_folder.py's `each_trial_ran`."""

from __future__ import annotations

import json

import pytest
from distributed import cli_in_process
from test_tune_run_folder import each_trial_ran

PLAN = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "32", "--global-batch", "4"]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    from benchmarks.harness import processes

    monkeypatch.setattr(processes, "run_torchrun_command", each_trial_ran)
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(tmp_path / "db.duckdb"))
    emitted = cli_in_process(*PLAN, "--strategies", "ddp", "--optimizer", "sgd", "--emit", tmp_path / "run")
    assert emitted.returncode == 0, emitted.stderr
    return tmp_path / "run"


def _one_line(result) -> str:
    assert result.returncode == 2, result.stdout
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


@pytest.mark.parametrize(
    ("flags", "dropped"),
    [
        (["--optimizer", "adamw"], "drop --optimizer"),  # the default's value, beside a folder planned with sgd
        (["--gpus-per-node", "8", "--nodes", "1"], "drop --gpus-per-node, --nodes"),
        (["--headroom", "0.1"], "drop --headroom"),
        (["--seq-len", "32"], "drop --seq-len"),  # the folder's own value: still a flag the folder answers
    ],
)
def test_a_flag_the_folder_answers_is_refused_even_at_its_default_value(folder, flags, dropped):
    before = (folder / "plan.json").read_text()
    assert dropped in _one_line(cli_in_process("tune", folder, *flags, "--budget", "5", "--tiny"))
    assert (folder / "plan.json").read_text() == before


def test_top_is_refused_beside_tune_which_shows_its_candidates(folder):
    assert "drop --top" in _one_line(cli_in_process("tune", folder, "--top", "2", "--budget", "5", "--tiny"))


def test_objective_beside_the_folder_replaces_the_recorded_one(folder):
    assert json.loads((folder / "plan.json").read_text())["run"]["search"]["objective"] == "throughput"
    tuned = cli_in_process("tune", folder, "--objective", "cost", "--budget", "5", "--tiny")
    assert tuned.returncode == 0, tuned.stderr
    assert "--objective replace the search plan.json recorded" in tuned.stderr
    assert json.loads((folder / "plan.json").read_text())["run"]["search"]["objective"] == "cost"


def test_the_full_ac_set_given_beside_a_folder_searched_with_one_mode_widens_it(folder, tmp_path):
    narrowed = tmp_path / "narrow"
    assert cli_in_process(*PLAN, "--ac", "none", "--emit", narrowed).returncode == 0
    tuned = cli_in_process("tune", narrowed, "--ac", "none,selective,full", "--budget", "5", "--tiny")
    assert tuned.returncode == 0, tuned.stderr
    assert "--ac replace the search plan.json recorded" in tuned.stderr
    assert json.loads((narrowed / "plan.json").read_text())["run"]["search"]["activation_checkpointing"] == [
        "none",
        "selective",
        "full",
    ]


def test_strategies_that_do_not_reshard_are_refused_on_an_elastic_folder_not_widened(tmp_path, monkeypatch):
    from benchmarks.harness import processes

    monkeypatch.setattr(processes, "run_torchrun_command", each_trial_ran)
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(tmp_path / "db.duckdb"))
    run_dir = tmp_path / "run"
    elastic = ["--global-batch", "8", "--emit", run_dir, "--elastic", "1:2"]
    assert cli_in_process(*PLAN[:-2], *elastic).returncode == 0
    before = (run_dir / "plan.json").read_text()
    line = _one_line(cli_in_process("tune", run_dir, "--strategies", "zero2", "--budget", "5", "--tiny"))
    assert "none of --strategies zero2 reshards" in line and "engine" in line and "fsdp" in line
    assert (run_dir / "plan.json").read_text() == before
