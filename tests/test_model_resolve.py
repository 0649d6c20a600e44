"""Name resolution: every way a user can name a model ends in the same ModelSpec,
or in one line that says what is wrong and what to do.

References: the catalog's meta-device counts (tests/test_catalog_counts.py
checks those against transformers) and the GPT-3 shapes of Brown et al. 2020.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hardware_selector_cli.app import main
from planner.errors import UserInputError
from planner.models.catalog import CATALOG_DIR, find_model
from planner.models.resolve import (
    find_in_hf_cache,
    resolve_model,
    spec_from_dimensions,
    spec_from_param_count,
)

LLAMA2_7B_PARAMS = 6_738_415_616  # meta-llama/Llama-2-7b-hf, counted by transformers


def catalog_config_path(name: str) -> Path:
    return CATALOG_DIR / "models" / f"{name}.json"


def write_config(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    config = json.loads(catalog_config_path(name).read_text())["config"]
    path = directory / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("typed", ["meta-llama/Llama-2-7b-hf", "llama-2-7b", "Llama2-7B", "LLAMA-2-7B", " llama_2_7b "])
def test_hf_id_alias_and_case_resolve_to_the_same_catalog_model(typed):
    spec = resolve_model(typed.strip())
    assert spec.name == "llama-2-7b"
    assert spec.params.total == LLAMA2_7B_PARAMS


def test_unknown_name_suggests_the_closest_catalog_models():
    with pytest.raises(UserInputError) as error:
        resolve_model("lama-2-7b")
    message = str(error.value)
    assert message.startswith("unknown model 'lama-2-7b'; did you mean 'llama-2-7b'")
    assert "\n" not in message


def test_config_json_file_and_model_directory(tmp_path):
    path = write_config(tmp_path / "my-llama", "llama-2-7b")
    from_file = resolve_model(str(path))
    from_dir = resolve_model(str(path.parent))
    assert from_file.params.total == from_dir.params.total == LLAMA2_7B_PARAMS
    assert from_dir.name == "my-llama"
    assert from_file.params.source == "meta-device"


def test_directory_without_config_json_is_a_clear_error(tmp_path):
    with pytest.raises(UserInputError, match="no config.json there"):
        resolve_model(str(tmp_path))


@pytest.mark.parametrize("name", ["{root}/models/config.json", "./llama/config.json", "~/nowhere-model-dir"])
def test_a_path_that_is_not_there_is_named_as_a_path_not_an_unknown_model(tmp_path, name):
    """It said "unknown model '/x/config.json'; ... (or pass a config.json path ...)": what its user had done."""
    with pytest.raises(UserInputError, match=r": no such file or folder; point at a model directory or its config"):
        resolve_model(name.format(root=tmp_path))


def test_a_typo_inside_a_folder_that_is_here_is_named_as_a_path(tmp_path, monkeypatch):
    """An audit: `--model qwen3-8b/config.jsn` beside the folder qwen3-8b/ was "unknown model ...; did you mean"
    (an HF id's shape); its folder being here makes it a path. An HF id with no such folder stays a name."""
    (tmp_path / "qwen3-8b").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserInputError, match=r"^qwen3-8b/config.jsn: no such file or folder"):
        resolve_model("qwen3-8b/config.jsn")
    with pytest.raises(UserInputError, match=r"^unknown model 'meta-llama/Llama-9'"):
        resolve_model("meta-llama/Llama-9")


def make_hf_cache(root: Path, repo_id: str, catalog_name: str) -> Path:
    """The layout huggingface_hub writes: models--org--name/{refs/main, snapshots/<rev>/config.json}."""
    repo_dir = root / ("models--" + repo_id.replace("/", "--"))
    revision = "0123456789abcdef0123456789abcdef01234567"
    write_config(repo_dir / "snapshots" / revision, catalog_name)
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(revision)
    return repo_dir


@pytest.mark.parametrize(
    ("name", "head", "size", "said"),
    [
        ("m.gguf.part", b"GGUF\x03\0\0\0", 2**30, "is a GGUF weights file"),
        ("model.safetensors", b"\x08\0\0\0\0\0\0\0{}", 64, "is a safetensors weights file"),
        ("config.json", b"{", 20 * 2**20, "is 20 MiB, too large for a config.json (those are kilobytes)"),
    ],
)
def test_a_weights_file_given_as_the_model_is_named_not_read_whole(tmp_path, monkeypatch, name, head, size, said):
    """An audit: a 1 GB GGUF given as --model was read whole (2 GB of memory) before "not valid JSON". The first
    bytes, the suffix or the size say what it is; read_text is never called."""
    path = tmp_path / name
    path.write_bytes(head)
    with path.open("r+b") as file:
        file.truncate(size)  # sparse: no disk used
    monkeypatch.setattr(Path, "read_text", lambda *a, **k: pytest.fail("read the file whole"))
    with pytest.raises(UserInputError, match="point --model at the model's folder or its config.json") as caught:
        resolve_model(str(path))
    assert said in str(caught.value)


def test_model_in_the_local_hf_cache_is_read_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    make_hf_cache(tmp_path, "acme/Private-Llama", "llama-2-7b")
    assert find_in_hf_cache("acme/private-llama") is not None
    spec = resolve_model("acme/Private-Llama")
    assert spec.params.total == LLAMA2_7B_PARAMS
    assert spec.name == "acme/Private-Llama"
    assert resolve_model("Private-Llama").params.total == LLAMA2_7B_PARAMS


def test_cache_prefers_the_snapshot_refs_main_points_at(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    repo_dir = make_hf_cache(tmp_path, "acme/two-revisions", "gpt2")
    stale = repo_dir / "snapshots" / "stale"
    write_config(stale, "gpt2-xl")
    assert resolve_model("acme/two-revisions").params.total == find_model("gpt2").params.total


def test_name_not_in_catalog_or_cache_is_unknown(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(UserInputError, match="unknown model 'acme/nothing-here'"):
        resolve_model("acme/nothing-here")


def test_dimensions_reproduce_llama_2_7b_exactly():
    spec = spec_from_dimensions(hidden=4096, layers=32, heads=32, ffn=11008, vocab=32000)
    assert spec.params.total == LLAMA2_7B_PARAMS
    assert spec.mlp_kind.value == "gated"


def test_dimensions_with_experts_count_active_parameters_like_mixtral():
    mixtral = find_model("mixtral-8x7b")
    spec = spec_from_dimensions(
        hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=32000, experts=8, top_k=2
    )
    assert spec.params.total == mixtral.params.total
    assert spec.params.active_per_token == mixtral.params.active_per_token
    assert spec.params.active_per_token < spec.params.total


def test_standard_mlp_dimensions_reproduce_gpt2():
    gpt2 = find_model("gpt2")
    spec = spec_from_dimensions(
        hidden=768, layers=12, heads=12, ffn=3072, vocab=50257, mlp="standard", max_positions=1024
    )
    assert spec.params.total == gpt2.params.total


@pytest.mark.parametrize(
    "kwargs, problem",
    [
        (dict(hidden=4096, layers=32, heads=30, ffn=11008, vocab=32000), "--heads 30 does not divide --hidden 4096"),
        (dict(hidden=4096, layers=32, heads=32, kv_heads=5, ffn=11008, vocab=32000), "--kv-heads 5 must divide"),
        (dict(hidden=4096, layers=32, heads=32, ffn=11008, vocab=32000, experts=8), "--experts needs --top-k"),
        (dict(hidden=4096, layers=0, heads=32, ffn=11008, vocab=32000), "--layers must be at least 1"),
        # an audit: the config field's name, and --kv-heads blamed where only --experts was given
        (
            dict(hidden=1024, layers=8, heads=16, ffn=4096, vocab=32000, experts=8, top_k=9),
            "--top-k 9 exceeds --experts 8",
        ),
        (
            dict(hidden=1024, layers=8, heads=16, ffn=4096, vocab=32000, experts=8, top_k=2, mlp="standard"),
            "^--experts describes gated",
        ),
        (
            dict(hidden=1024, layers=8, heads=16, kv_heads=4, ffn=4096, vocab=32000, mlp="standard"),
            "^--kv-heads describes gated",
        ),
    ],
)
def test_bad_dimensions_are_named(kwargs, problem):
    with pytest.raises(UserInputError, match=problem):
        spec_from_dimensions(**kwargs)


@pytest.mark.parametrize("params, layers", [(7.5e9, 32), (125e6, 12), (70e9, 40)])
def test_bare_parameter_count_is_exact_and_gpt3_shaped(params, layers):
    spec = spec_from_param_count(params)
    assert spec.params.total == int(params)
    assert spec.num_layers == layers
    # The shape's own formula count, embedding included, lands near the request: the width was chosen for it.
    from planner.models.resolve import _param_count_shape

    own = _param_count_shape(spec.num_layers, spec.hidden_size, spec.hidden_size // spec.num_heads).params.total
    assert 0.85 < own / params <= 1  # at most one head's width short (125M: 12 x 704, where 768 is 130M)


def test_cli_unknown_model_is_one_line_and_exit_2(capsys):
    code = main(["estimate", "--model", "lama-7b", "--gpu", "a100-80gb"])
    captured = capsys.readouterr()
    assert code == 2
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "unknown model 'lama-7b'; did you mean" in lines[0]
    assert "Traceback" not in captured.err + captured.out


@pytest.mark.parametrize(
    "content, problem",
    [
        (
            '{"model_type": "llama", "hidden_size": "big", "num_hidden_layers": 2}',
            "field 'hidden_size' must be an integer",
        ),
        ('{"model_type": "llama",\n "hidden_size": 4096,,}', "not valid JSON (line 2"),
        ('{"hidden_size": 4096}', "field 'model_type' is missing"),
    ],
)
def test_cli_malformed_config_names_the_field(tmp_path, capsys, content, problem):
    path = tmp_path / "config.json"
    path.write_text(content)
    code = main(["estimate", "--model", str(path), "--gpu", "a100-80gb"])
    captured = capsys.readouterr()
    assert code == 2
    assert problem in captured.err
    assert len([line for line in captured.err.splitlines() if line.strip()]) == 1


def test_cli_params_and_dimension_flags(capsys):
    assert main(["estimate", "--params", "7.5e9", "--gpu", "a100-80gb", "--seq-len", "1024", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["model"]["params"] == 7_500_000_000
    code = main(
        [
            "estimate",
            "--hidden",
            "4096",
            "--layers",
            "32",
            "--heads",
            "32",
            "--ffn",
            "11008",
            "--vocab",
            "32000",
            "--gpu",
            "a100-80gb",
            "--seq-len",
            "1024",
            "--json",
        ]
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out)["model"]["params"] == LLAMA2_7B_PARAMS


def test_cli_refuses_two_ways_of_naming_a_model(capsys):
    assert main(["estimate", "--model", "gpt2", "--params", "1e9", "--gpu", "a100-80gb"]) == 2
    assert "give only one of --model, --params" in capsys.readouterr().err


def test_every_catalog_entry_has_its_stored_config():
    from planner.models.catalog import load_catalog

    stored = {path.stem for path in (CATALOG_DIR / "models").glob("*.json")}
    assert {spec.name for spec in load_catalog()} == stored


@pytest.mark.parametrize("params", [-5, 0, 5e5, 2e6, 4_340_671])
def test_a_param_count_below_the_floor_names_the_floor_whatever_its_sign(params):
    """--params -5 said "must be at least 0", and then 0 was refused as "must be at least 1e6"; an audit then found
    --params 2e7 built a 22M embedding into a 20M model (1e6 passed that floor). The floor is the smallest shape
    it builds, 12 layers of width 64, counted by the same formula."""
    from planner.models.resolve import _param_count_shape

    least = _param_count_shape(12, 64, 64).params.total
    assert least == 4_340_672
    with pytest.raises(UserInputError) as refused:
        spec_from_param_count(params)
    assert str(refused.value).startswith(f"--params must be at least 4,340,672 (the smallest GPT-shaped model it "
                                         f"builds: 12 layers x 64 hidden, GPT-2's 50,257-token vocabulary), not {params:g}")  # fmt: skip


@pytest.mark.parametrize("params", [4_340_672, 2e7, 1.2e8, 7.5e9, 7e10, 1e13])
def test_the_shape_a_param_count_builds_holds_its_parts(params):
    """The embedding, the largest layer and the shape's own count stay within the total asked for, which is exact;
    the shape is within one head's width of the count (the formula's total at that width)."""
    from planner.models.resolve import _param_count_shape

    spec = spec_from_param_count(params)
    assert spec.params.total == int(params)
    head = spec.hidden_size // spec.num_heads
    own = _param_count_shape(spec.num_layers, spec.hidden_size, head).params.total
    wider = _param_count_shape(spec.num_layers, spec.hidden_size + head, head).params.total
    assert max(spec.params.embedding, spec.params.largest_layer) <= own <= params < wider
