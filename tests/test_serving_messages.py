"""What `plan --mode inference` says about the output length it planned, and its flags named as given
(docs/inference.md): the default output shortened to fit the context is said, a prompt that fills it is refused."""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main
from planner.errors import UserInputError
from planner.models.resolve import resolve_model

SERVE_8B = ["plan", "--mode", "inference", "--model", "llama-3.1-8b", "--gpu", "H100-80GB", "--gpus-per-node", "1"]


def test_a_default_output_shortened_to_fit_the_context_is_said(capsys):
    """--context 131000 planned 131000+72 tokens without a word, while the help says 256."""
    window = resolve_model("llama-3.1-8b").max_position_embeddings
    assert main([*SERVE_8B, "--context", "131000", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    output = document["best"]["request"]["output"]
    assert output == window - 131000 < 256  # the reference: the model's context minus the prompt
    note = (
        f"{output} output tokens per request, not the default 256: llama-3.1-8b's {window}-token context leaves "
        f"{output} after the 131000-token prompt (--output-tokens N sets it)"
    )
    assert document["notes"] == [note] and note in document["best"]["reasons"]


def test_a_prompt_that_fills_the_context_is_refused_naming_the_output_used(capsys):
    """It said "context + output (200001 tokens)": the default 256 cut to 1 without a word."""
    assert main([*SERVE_8B, "--context", "200000"]) == 2
    err = capsys.readouterr().err.strip()
    assert "200001" not in err and "\n" not in err
    assert "a 200000-token prompt leaves no room to generate within llama-3.1-8b's 131072-token context" in err
    assert "shorten --context (to 130816 for the default 256 output tokens)" in err
    assert main([*SERVE_8B, "--context", "130816", "--json"]) == 0  # the advice, as printed, plans 256 tokens
    assert json.loads(capsys.readouterr().out)["best"]["request"]["output"] == 256
    assert main([*SERVE_8B, "--context", "131000", "--output-tokens", "100"]) == 2
    assert "(131000 + 100 = 131100 tokens) exceeds" in capsys.readouterr().err


def test_the_api_names_the_prompt_it_was_given():
    from hardware_selector import get_inference_config

    with pytest.raises(UserInputError, match=r"a 500000-token prompt leaves no room .*; shorten context") as caught:
        get_inference_config("text_generation", "llama-3.1-8b", context=500000)
    assert "500001" not in str(caught.value)


def test_top_zero_names_the_flag_not_the_field(capsys):
    assert main([*SERVE_8B, "--top", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: --top must be at least 1, not 0"
