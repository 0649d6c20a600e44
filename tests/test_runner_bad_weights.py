"""Weights a run would not load never become a silent start from random weights (docs/running.md, "Weights").

A model folder that holds its weights only as a pickle, as safetensors shards without their index, or under
another name (an adapter's) is refused by `plan --emit` and `train` in one line saying what would load it,
unless --init random asks for it; a folder with no weights at all is planned, and both say the run starts from
random weights. The folders are built from the shared trained run's model (tests/trained_run.py).
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.distributed import cli_in_process as cli
from tests.distributed import train_with_warm_ranks
from tests.test_runner_bad_input import emit, one_line_error
from tests.trained_run import shared_trained_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """A folder for this file's runs, and the shared run's model and text (read, never written here)."""
    shared = shared_trained_run(tmp_path_factory)
    return tmp_path_factory.mktemp("weights"), shared.model_dir, shared.corpus


def test_a_checkpoint_kept_only_as_a_pickle_is_refused_not_trained_from_random_weights(user, tmp_path):
    root, model_dir, _ = user
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    shutil.copy(model_dir / "config.json", pickled / "config.json")
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04not loaded")
    completed = emit(root, pickled, "from pickle")
    one_line_error(completed, "holds its weights only as pytorch_model.bin (a pickle, never loaded here")
    assert not (root / "from pickle").exists()
    assert emit(root, pickled, "from scratch", "--init", "random").returncode == 0  # the explicit choice stands


@pytest.mark.parametrize(
    ("weights", "fragment"),
    [
        ("model-00001-of-00002.safetensors", "but not model.safetensors.index.json, the index its shards are found by"),
        ("adapter_model.safetensors", "but no model.safetensors (nor its index)"),
    ],
)
def test_weights_that_would_not_be_loaded_are_refused_not_trained_from_random(user, tmp_path, weights, fragment):
    """An audit: shards copied without their index, or an adapter's folder, trained silently from random weights
    (the losses matched a config-only folder's to the digit). The real weights file is copied under that name."""
    _, model_dir, _ = user
    folder = tmp_path / "weights"
    folder.mkdir()
    shutil.copy(model_dir / "config.json", folder / "config.json")
    shutil.copy(model_dir / "model.safetensors", folder / weights)
    one_line_error(emit(tmp_path, folder, "refused"), fragment)
    assert not (tmp_path / "refused").exists()
    chosen = emit(tmp_path, folder, "scratch", "--init", "random")
    assert chosen.returncode == 0  # asked for: said, as train says it
    assert (
        f"note: training from random weights as --init random asks; {folder.resolve()}'s {weights} is not "
        "loaded" in chosen.stdout
    )


def test_a_model_folder_without_weights_says_the_run_starts_from_random_weights(user, tmp_path):
    """A config.json alone plans a pretraining (allowed), said at emit and again at train's start."""
    from backends.runner.folder import load_run_folder
    from planner.rundir.run_overrides import RunOverrides

    _, model_dir, _ = user
    folder = tmp_path / "config only"
    folder.mkdir()
    shutil.copy(model_dir / "config.json", folder / "config.json")
    emitted = emit(tmp_path, folder, "from config")
    note = f"note: {folder.resolve()} holds no weights (no model.safetensors), so the run starts from random weights"
    assert emitted.returncode == 0 and note in emitted.stdout
    assert load_run_folder(tmp_path / "from config", RunOverrides()).notes[0].startswith(note)
    assert "note:" not in emit(tmp_path, model_dir, "with weights").stdout


def test_a_run_folder_that_would_train_from_random_weights_beside_a_pickle_is_refused_at_train(user, tmp_path):
    """A folder emitted before emit refused a pickle-only checkpoint (its plan.json does not record that
    --init random was asked for) is refused by `train` in one line, nothing written; `train --init random`,
    or a folder emitted with it, trains from scratch and says so."""
    from backends.runner.folder import load_run_folder
    from planner.rundir.run_overrides import RunOverrides

    root, model_dir, corpus = user
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(model_dir / name, pickled / name)
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04not loaded")
    assert emit(tmp_path, pickled, "chosen", "--init", "random", "--data", corpus).returncode == 0
    plan = json.loads((tmp_path / "chosen" / "plan.json").read_text())
    assert plan["run"]["model"]["init"] == "random" and plan["run"]["model"]["init_explicit"] is True
    old = tmp_path / "old"
    shutil.copytree(tmp_path / "chosen", old)
    del plan["run"]["model"]["init_explicit"]  # as emitted before the field, or edited
    (old / "plan.json").write_text(json.dumps(plan))
    before = sorted(path.name for path in old.iterdir())
    one_line_error(cli("train", old, "--steps", "1"), "holds its weights only as pytorch_model.bin (a pickle")
    assert "convert them to safetensors" in cli("train", old).stderr
    assert sorted(path.name for path in old.iterdir()) == before
    note = "note: training from random weights as --init random asks"
    assert load_run_folder(tmp_path / "chosen", RunOverrides()).notes[0].startswith(note)
    assert load_run_folder(old, RunOverrides(init="random")).notes[0].startswith(note)
    trained = train_with_warm_ranks(old, "--init", "random", "--steps", "1", "--nproc", "1")
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert note in trained.stdout + trained.stderr


def test_a_config_naming_its_own_modeling_code_says_that_code_is_not_run(user, tmp_path):
    """Found by a new user's audit (2026-11-30): a checkpoint whose config.json maps AutoModelForCausalLM to its own
    modeling_*.py was planned and trained as transformers' stock class without a word (final/ lost auto_map). The
    code is never run (remote code stays off); emit and train now say the stock class trains."""
    from backends.runner.folder import load_run_folder
    from planner.rundir.run_overrides import RunOverrides

    _, model_dir, _ = user
    folder = tmp_path / "custom code"
    shutil.copytree(model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_mine.MyGPT", "AutoTokenizer": ["tokenization_mine.T", None]}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "modeling_mine.py").write_text("raise SystemExit('remote code ran')\n")
    emitted = emit(tmp_path, folder, "custom")
    note = (
        f"note: {folder.resolve()}'s config.json names its own modeling code (modeling_mine.MyGPT, "
        "tokenization_mine.T); it is never run "
        "(remote code stays off), so the run trains transformers' own 'gpt2' model"
    )
    assert emitted.returncode == 0 and note in emitted.stdout, emitted.stdout
    assert any(line.startswith(note) for line in load_run_folder(tmp_path / "custom", RunOverrides()).notes)


def test_a_damaged_safetensors_checkpoint_is_one_line_at_emit(user, tmp_path):
    """Found by a new user's audit (2026-11-30): a corrupt model.safetensors passed `plan --emit` and was refused
    only by `train`. The header (8 bytes of length, then JSON) and the tensors' extent are read at emit: a file cut
    short or garbage is one line, nothing written; the intact file emits (weight_headers.py)."""
    _, model_dir, _ = user
    whole = (model_dir / "model.safetensors").read_bytes()
    for name, data, fragment in (
        ("cut", whole[: len(whole) // 2], "is cut short: its tensors end at byte"),
        ("garbage", b"not a checkpoint at all", "is not a readable safetensors file"),
    ):
        folder = tmp_path / name
        shutil.copytree(model_dir, folder)
        (folder / "model.safetensors").write_bytes(data)
        one_line_error(emit(tmp_path, folder, f"run-{name}"), f"{folder.resolve() / 'model.safetensors'} {fragment}")
        assert not (tmp_path / f"run-{name}").exists()
    assert emit(tmp_path, model_dir, "intact").returncode == 0
