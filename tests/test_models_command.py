"""`hardware-selector models`: numbers are never cut at any terminal width (a narrow one drops whole columns and
says so), a search that finds nothing is one line naming the closest models with exit 1 (as `plan` exits 1 when
nothing fits), and the legacy names `--model` accepts are found too. References: `models --json` (every field,
formatted as the table formats it), planner/models/legacy_names.py and the catalog's own suggestions."""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main
from planner.models.catalog import suggest_models
from planner.models.legacy_names import LEGACY_MODEL_NAMES
from planner.units import format_count


def _catalog(capsys) -> list[dict]:
    assert main(["models", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("width", [200, 130, 100, 80, 60, 40])
def test_numbers_are_never_cut(capsys, monkeypatch, width: int) -> None:
    catalog = _catalog(capsys)
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and max(map(len, out.splitlines())) <= width
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    for model in catalog:
        row = rows[model["name"]]  # every name whole on its row (`models | grep NAME` finds it), at every width
        assert format_count(model["params"]) in row  # params always stays, whole
        if width >= 100:  # every number column, whole, where the longest name leaves room for them all
            assert row[-1] == str(model["vocab_size"]) and str(model["num_layers"]) in row
        elif width == 80:  # an auditor's width: the columns but the last two (--json has them)
            assert str(model["num_layers"]) in row and str(model["hidden_size"]) in row
    if width < 100:
        assert "left out for this terminal's width; --json has every field" in " ".join(out.split())


def test_a_search_that_finds_nothing_is_one_line_with_exit_1(capsys) -> None:
    for text, closest in (("zzz", None), ("lamma-3-70b", suggest_models("lamma-3-70b"))):
        code = main(["models", "--search", text])
        captured = capsys.readouterr()
        assert code == 1 and captured.out == "" and len(captured.err.splitlines()) == 1
        if closest:
            assert f"no catalog model matches '{text}'; closest: {', '.join(closest)}" in captured.err
        else:
            assert captured.err.startswith("no catalog model matches 'zzz', nor is one close")
    assert main(["models", "--search", "zzz", "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == []


@pytest.mark.parametrize("legacy", sorted(LEGACY_MODEL_NAMES))
def test_search_finds_legacy_names(capsys, legacy: str) -> None:
    assert main(["models", "--search", legacy, "--json"]) == 0
    found = [model["name"] for model in json.loads(capsys.readouterr().out)]
    assert LEGACY_MODEL_NAMES[legacy] in found


def test_the_json_has_the_experts_ffn_the_table_prints(capsys, monkeypatch) -> None:
    """An MoE model's table cell reads `768x128` (each expert's FFN x experts): the JSON carries the same figure as
    `expert_ffn_size` beside the dense blocks' `ffn_size` (the catalog's Qwen3-30B-A3B), so a reader of `--json` does
    not take the dense size for the experts' (a new user's audit, 2026-11-30)."""
    catalog = {model["name"]: model for model in _catalog(capsys)}
    qwen = catalog["qwen3-30b-a3b"]
    assert (qwen["ffn_size"], qwen["expert_ffn_size"], qwen["num_experts"]) == (6144, 768, 128)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["models", "--search", "qwen3-30b-a3b"]) == 0
    assert f"{qwen['expert_ffn_size']}x{qwen['num_experts']}" in capsys.readouterr().out
    assert all(model["expert_ffn_size"] == 0 for model in catalog.values() if not model["num_experts"])


@pytest.mark.parametrize(
    ("value", "printed"),
    [
        (999_885_952, "1.00B"),  # gemma-3-1b's count was printed "1000M" (a new user's audit, 2026-11-30)
        (6_738_415_616, "6.74B"),
        (124_439_808, "124M"),
        (9_999_000, "10.0M"),
        (99_960_000, "100M"),
        (999_499, "999K"),
        (999.6, "1.00K"),
        (5, "5"),
    ],
)
def test_a_count_that_rounds_up_is_said_in_the_next_unit(value: float, printed: str) -> None:
    assert format_count(value) == printed


@pytest.mark.parametrize("word", ["moe", "MoE", "experts", "mixture-of-experts"])
def test_a_search_for_moe_finds_every_mixture_of_experts_model(capsys, word: str) -> None:
    """An audit: `models --search moe` found the qwen*_moe types only; Mixtral, DeepSeek, gpt-oss and Llama 4 are
    mixtures of experts under other type names. The reference is the catalog's own expert counts."""
    catalog = _catalog(capsys)
    assert main(["models", "--search", word, "--json"]) == 0
    found = {model["name"] for model in json.loads(capsys.readouterr().out)}
    assert found == {model["name"] for model in catalog if model["num_experts"]}
    assert {"mixtral-8x7b", "deepseek-v3", "gpt-oss-20b", "llama-4-scout"} <= found
