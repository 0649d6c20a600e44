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


def test_a_default_prompt_cut_to_half_a_short_context_is_said(capsys):
    """gpt2's 1024 positions: the default prompt is half of them, 512, and the answer says so (the help names the
    rule); a prompt given is never said."""
    serve_gpt2 = ["plan", "--mode", "inference", "--model", "gpt2", "--gpu", "H100-80GB", "--gpus-per-node", "1"]
    assert main([*serve_gpt2, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["best"]["request"]["context"] == resolve_model("gpt2").max_position_embeddings // 2 == 512
    note = "512-token prompts, not the default 2048: half gpt2's 1024-token context (--context N sets it)"
    assert note in document["notes"]
    assert main([*serve_gpt2, "--context", "512", "--json"]) == 0
    assert not any("not the default 2048" in note for note in json.loads(capsys.readouterr().out)["notes"])


def test_alibi_and_position_free_models_are_served_past_their_stated_length(capsys):
    """ALiBi and no positions have no table to run out of (docs/models-and-hardware.md): an MPT-7B shape serves
    60,000 + 5,000 tokens; the same shape with learned positions is refused at its table's 8,192."""
    shape = ["--hidden", "4096", "--layers", "32", "--heads", "32", "--vocab", "50432", "--ffn", "16384"]
    serve = ["plan", "--mode", "inference", "--gpu", "H100-80GB", "--context", "60000", "--output-tokens", "5000"]
    for positions in ("alibi", "none"):
        assert main([*serve, *shape, "--mlp", "standard", "--positions", positions, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["best"]["request"]["context"] == 60000
    assert main([*serve, *shape, "--mlp", "standard", "--positions", "learned"]) == 2
    assert "exceeds custom-h4096-l32's 8192-token context" in capsys.readouterr().err


def test_tp_pins_the_serving_degree_and_says_what_it_cannot(capsys):
    """`--tp 4` serves at TP 4 alone (vLLM's --tensor-parallel-size), every candidate and nothing rejected for another
    degree; a degree that does not divide the node, or that the heads do not split over, is one line; a training plan
    given --tp says it searches the degree; --pp given to plan says the same of the stages."""
    serve_70b = ["plan", "--mode", "inference", "--model", "llama-3.1-70b", "--gpu", "H100-80GB"]
    assert main([*serve_70b, "--tp", "4", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {plan["tensor_parallel"] for plan in document["candidates"]} == {4}
    assert document["best"]["request"]["tensor_parallel"] == 4
    assert not any(label.startswith(("TP1", "TP2", "TP8")) for label in document["rejected"])
    assert main([*serve_70b, "--json"]) == 0  # unpinned: other degrees are planned
    assert {plan["tensor_parallel"] for plan in json.loads(capsys.readouterr().out)["candidates"]} != {4}
    for tp, why in (("3", "--tp 3 does not divide a node's 8 GPUs"), ("16", "--tp 16 does not divide a node's 8 GPUs")):
        assert main([*serve_70b, "--tp", tp]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {why}") and "choose one of 1, 2, 4, 8" in err
    # An audit's grammar: one GPU a node, and one serving flag without --mode inference.
    assert (
        main(["plan", "--mode", "inference", "--model", "gpt2", "--gpu", "L4", "--gpus-per-node", "1", "--tp", "2"])
        == 2
    )
    assert capsys.readouterr().err.startswith("error: --tp 2 does not divide a node's 1 GPU: tensor parallelism")
    assert main(["plan", "--model", "gpt2", "--gpu", "H100-80GB", "--context", "128"]) == 2
    assert capsys.readouterr().err.strip() == "error: --context plans serving; add --mode inference"
    gpt2 = ["plan", "--mode", "inference", "--model", "gpt2", "--gpu", "H100-80GB", "--tp", "8"]
    assert main([*gpt2[:-1], "4", "--json"]) == 0  # 12 heads refuse TP 8: not said when TP 4 was asked for
    assert not any(label.startswith("TP8") for label in json.loads(capsys.readouterr().out)["rejected"])
    assert main([*gpt2[:-2], "--json"]) == 0  # unpinned, the refused degree is said
    assert any(label.startswith("TP8") for label in json.loads(capsys.readouterr().out)["rejected"])
    assert main(gpt2) == 2
    assert capsys.readouterr().err == (
        "error: --tp 8: 12 attention heads do not split evenly over 8 GPUs (vLLM and TensorRT-LLM split heads evenly)\n"
    )
    assert main(["plan", "--model", "llama-3.1-70b", "--gpu", "H100-80GB", "--tp", "4"]) == 2
    assert "--tp pins a serving plan's tensor-parallel degree (add --mode inference)" in capsys.readouterr().err
    assert main([*serve_70b, "--pp", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`plan` searches the pipeline stages over the cluster" in err


def test_a_pinned_degree_keeps_its_suggestions_valid(capsys):
    """With --tp 3 on six-GPU nodes, the larger cluster suggested keeps six GPUs a node (so TP 3 still divides it) and
    fits as printed; a refused degree names only the degrees the heads split over (gpt2's 12 heads: not 8)."""
    base = ["plan", "--mode", "inference", "-m", "opt-66b", "-g", "L4", "--gpus-per-node", "6", "--context", "2000"]
    assert main([*base, "--tp", "3", "--json"]) == 1  # nothing fits: the suggestions say what would
    suggestions = json.loads(capsys.readouterr().out)["suggestions"]
    assert "12 x L4 (--gpus-per-node 6 --nodes 2) fits" in suggestions
    assert main([*base, "--tp", "3", "--nodes", "2", "--json"]) == 0  # as printed
    assert {plan["tensor_parallel"] for plan in json.loads(capsys.readouterr().out)["candidates"]} == {3}
    assert main(["plan", "--mode", "inference", "-m", "gpt2", "-g", "H100-80GB", "--tp", "3"]) == 2
    assert capsys.readouterr().err.endswith("choose one of 1, 2, 4\n")


def test_alibi_defaults_come_from_the_stated_length(capsys):
    """bloom-560m (ALiBi, trained at 2048): the default prompt is half that, said; only a given length passes it."""
    serve = ["plan", "--mode", "inference", "-m", "bloom-560m", "-g", "H100-80GB", "--gpus-per-node", "1", "--json"]
    assert main(serve) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["best"]["request"]["context"], document["best"]["request"]["output"]) == (1024, 256)
    assert document["notes"] == [
        "1024-token prompts, not the default 2048: half bloom-560m's 2048-token context (--context N sets it)"
    ]
    assert main([*serve, "--context", "8000"]) == 0
    request = json.loads(capsys.readouterr().out)["best"]["request"]
    assert (request["context"], request["output"]) == (8000, 256)


def test_the_python_selection_names_its_own_keyword_in_a_note():
    """select_hardware_for_task takes seq_len, not context, and sets no output length or formats."""
    from planner.selector import HardwareSelector

    answer = HardwareSelector().select_hardware_for_task(
        "text_generation", "gpt2", task_type="inference", batch_size=1, gpu_count=1, candidates=["H100-80GB"]
    )
    assert answer["primary_recommendation"]
    from planner.selector.serving import SELECT_SERVING_FLAGS

    assert (SELECT_SERVING_FLAGS.context, SELECT_SERVING_FLAGS.weights, SELECT_SERVING_FLAGS.kv_cache) == (
        "seq_len",
        None,
        None,
    )
    assert SELECT_SERVING_FLAGS.set("seq_len", "N", placeholder=True) == "seq_len=N"
