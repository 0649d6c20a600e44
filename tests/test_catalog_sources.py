"""The catalog entries that were entered from memory, checked against their published config.json (issue 34).

Each names where its config was checked (config_source: the official Hub file, and the readable copies its
values were read from); their exact counts are pinned here, and they agree with what the model cards publish
(tests/test_frontier_catalog.py holds the rounded published sizes).
"""

from __future__ import annotations

import json

import pytest

from planner.models.catalog import CATALOG_DIR, find_model

CHECKED = ("llama-4-scout", "llama-4-maverick", "gpt-oss-20b", "gpt-oss-120b", "gemma-3-1b", "gemma-3-27b",
           "mistral-small-24b", "phi-4")  # fmt: skip


def _entry(name: str) -> dict:
    return json.loads((CATALOG_DIR / "models" / f"{name}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", CHECKED)
def test_entry_names_its_official_config_and_what_was_read(name):
    entry = _entry(name)
    source = entry["config_source"]
    assert source["url"] == f"https://huggingface.co/{entry['hf_id']}/blob/main/config.json"
    assert source["read_from"] and all(source["read_from"])
    assert source["note"]


# Exact totals and per-token counts from transformers' classes on the meta device (the catalog's counts, which
# tests/test_catalog_counts.py holds equal to the dimension formula). Published: gpt-oss's model card Table 1,
# 20.91B and 116.83B; Llama 4 Maverick 400B total / 17B active and Scout 17B active (Meta's cards); Phi-4 14.7B and
# Mistral-Small-24B-Base-2501 23.6B (the Hub's safetensors counts); Gemma 3: 1B, 27B with its 0.4B vision encoder.
EXACT = {
    "llama-4-scout": (107_769_861_120, 17_172_894_720),
    "llama-4-maverick": (400_711_848_960, 17_184_691_200),
    "gpt-oss-20b": (20_914_757_184, 4_187_440_704),
    "gpt-oss-120b": (116_829_156_672, 5_711_982_912),
    "gemma-3-1b": (999_885_952, 999_885_952),
    "gemma-3-27b": (27_009_346_304, 27_009_346_304),
    "mistral-small-24b": (23_572_403_200, 23_572_403_200),
    "phi-4": (14_659_507_200, 14_659_507_200),
}


@pytest.mark.parametrize("name", CHECKED)
def test_exact_counts(name):
    params = find_model(name).params
    assert (params.total, params.active_per_token) == EXACT[name]


def test_scout_text_model_by_hand():
    """Llama 4 Scout's text model from the dimensions its config gives: 48 MoE blocks of q/o (5120 x 5120) and k/v
    (5120 x 8 x 128) attention, a router over 16 experts of a 3 x 5120 x 8192 SwiGLU plus one shared expert of the
    same size, two norms; untied 202,048 x 5120 embedding and head; a final norm."""
    h, vocab, experts, ffn = 5120, 202_048, 16, 8192
    attention = 2 * h * h + 2 * h * 8 * 128
    moe = h * experts + experts * 3 * h * ffn + 3 * h * ffn
    assert EXACT["llama-4-scout"][0] == 48 * (attention + moe + 2 * h) + 2 * vocab * h + h


def test_scout_keeps_the_base_models_positions():
    """meta-llama/Llama-4-Scout-17B-16E's text_config: 262,144 positions, llama3 rope scaling by 8."""
    spec = find_model("llama-4-scout")
    config = _entry("llama-4-scout")["config"]
    assert spec.max_position_embeddings == 262_144
    assert (config["rope_scaling"]["factor"], config["rope_scaling"]["high_freq_factor"]) == (8.0, 4.0)


def test_models_json_names_a_config_source_for_every_entry(capsys):
    """`models --json` names where every entry's dimensions come from (issue 34: `models` names a source for every
    number): the official config.json by its Hub id, and for the entries checked above the copies read."""
    from hardware_selector_cli.app import main

    assert main(["models", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == len(list((CATALOG_DIR / "models").glob("*.json")))
    for model in listed:
        assert model["config_source"].startswith(f"https://huggingface.co/{model['hf_id']}/blob/main/config.json")
        assert model["params_source"]
        checked = model["name"] in CHECKED
        assert ("; read from: " in model["config_source"]) == checked, model["name"]
        assert ("copied into the catalog entry" in model["config_source"]) != checked, model["name"]


def test_a_model_not_from_the_catalog_names_its_origin_as_its_config_source(capsys):
    """`estimate --json` prints the same model summary: a parameter count or given dimensions have no config file."""
    from hardware_selector_cli.app import main

    base = ["estimate", "--gpu", "a100-80gb", "--seq-len", "1024", "--json"]
    assert main([*base, "--params", "7.5e9"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["config_source"] == "--params"
    dims = ["--hidden", "1024", "--layers", "4", "--heads", "16", "--ffn", "4096", "--vocab", "32000"]
    assert main([*base, *dims]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["config_source"].startswith("the dimensions given")


def test_the_table_keeps_every_name_whole_on_an_80_column_terminal(capsys, monkeypatch):
    """Piped or at 80 columns, `models` folded long names ("bert-large-uncase" / "d"), so `models | grep NAME`
    found nothing (a long-time user's audit, 2026-11-30): names stay on one line, the number columns give way."""
    from hardware_selector_cli.app import main

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["models", "--json"]) == 0
    names = [model["name"] for model in json.loads(capsys.readouterr().out)]
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(any(line.split()[:1] == [name] for line in lines) for name in names)
    assert max(len(line) for line in lines) <= 80
