"""The formats a serving plan is made in: bf16 on a GPU without it (docs/inference.md, "Formats")."""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main

V100 = ["plan", "--mode", "inference", "--model", "llama-2-7b", "--gpu", "V100-32GB", "--gpus-per-node", "1"]
SWITCH = "weights and KV cache in fp16, not bf16: V100-32GB has no bf16"


def test_the_default_bf16_on_a_v100_is_planned_and_titled_as_fp16(capsys):
    """The title said "bf16 weights" while the plan (its JSON) held fp16 weights and KV cache, without a word."""
    assert main([*V100, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    planned = document["best"]["request"]
    assert (planned["weights"], planned["kv_cache"]) == ("fp16", "fp16")  # the reference: what was planned
    assert document["notes"][0].startswith(SWITCH) and document["best"]["reasons"][0] == document["notes"][0]
    assert main(V100) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"tokens, {planned['weights']} weights (V100-32GB has no bf16)" in out and "bf16 weights" not in out
    assert SWITCH in out


@pytest.mark.parametrize("flag", ["--weights", "--kv-cache"])
def test_an_explicit_bf16_on_a_v100_is_refused_naming_fp16_which_then_plans(capsys, flag):
    assert main([*V100, flag, "bf16"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: V100-32GB has no bf16; use {flag} fp16") and "\n" not in err
    assert main([*V100, flag, "fp16", "--json"]) == 0  # the advice, followed as printed, plans
    assert json.loads(capsys.readouterr().out)["best"] is not None


def test_a_cpu_is_refused_with_advice_that_can_be_followed(capsys):
    """It said "use fp32", which --weights rejects and --precision (training's) is refused in this mode."""
    assert main(["plan", "--mode", "inference", "--model", "llama-3.1-8b", "--gpu", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cpu has no bf16 or fp16 matmuls" in err and "--gpu L4" in err and "fp32" not in err
    assert main(["plan", "--mode", "inference", "--model", "llama-3.1-8b", "--gpu", "L4", "--json"]) == 0
    capsys.readouterr()
