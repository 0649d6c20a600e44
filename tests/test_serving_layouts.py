"""Every tensor-parallel degree the node allows is a layout or is listed with why not (planner/inference/layouts.py;
docs/inference.md, "Layouts": "other layouts says why each layout lost")."""

from __future__ import annotations

import json
import re

import pytest

from hardware_selector_cli.app import main
from planner.inference.layouts import tp_refusal
from planner.models.resolve import resolve_model
from planner.search.strategy_layout import divisors


@pytest.mark.parametrize(
    "model, gpu, per_node, missing",
    [("qwen2.5-7b", "A100-40GB", 8, {8}), ("llama-2-70b", "H100-80GB", 6, {3, 6})],
)
def test_a_tensor_parallel_degree_the_heads_do_not_allow_is_listed_with_why(capsys, model, gpu, per_node, missing):
    """TP8 for qwen2.5-7b (28 heads) and TP3, TP6 for llama-2-70b (64 heads) vanished without a reason."""
    argv = ["plan", "--mode", "inference", "--model", model, "--gpu", gpu, "--gpus-per-node", str(per_node),
            "--batch", "16", "--top", "100", "--json"]  # fmt: skip
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    labels = [*document["rejected"], *(plan_label(plan) for plan in document["candidates"])]
    planned = {int(m.group(1)) for label in labels if (m := re.match(r"TP(\d+)", label))} | {1}
    heads = resolve_model(model).num_heads
    for tp in divisors(per_node):  # the reference: the heads' arithmetic
        listed = f"TP{tp} (any pipeline stages)"
        if heads % tp:
            assert tp in missing and document["rejected"][listed] == (
                f"{heads} attention heads do not split evenly over {tp} GPUs (vLLM and TensorRT-LLM split heads evenly)"
            )
        else:
            assert tp in planned and listed not in document["rejected"]


def test_kv_heads_that_neither_divide_nor_are_divided_by_tp_are_the_reason():
    spec = resolve_model("llama-2-70b")  # 64 heads, 8 KV heads
    assert tp_refusal(spec, 16) is None  # 16 % 8 == 0: each KV head copied on two GPUs
    fake = spec.model_copy(update={"num_heads": 48})
    assert tp_refusal(fake, 6) == "8 KV heads neither split evenly over 6 GPUs nor divide 6"


def plan_label(plan: dict) -> str:
    from planner.inference import ServingPlan

    return ServingPlan.model_validate(plan).label


def test_every_pipeline_parallel_plan_says_it_is_modelled_without_micro_batches_in_flight(capsys):
    """docs/accuracy.md has no PP serving row: a PP plan's reasons and its 'other layouts' line say so."""
    from planner.inference.layouts import PP_CAVEAT, PP_CAVEAT_SHORT

    argv = ["plan", "--mode", "inference", "--model", "llama-2-70b", "--gpu", "H100-80GB", "--batch", "32",
            "--top", "100", "--json"]  # fmt: skip
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    plans = document["candidates"]
    assert any(plan["pipeline_parallel"] > 1 for plan in plans)
    for plan in plans:
        assert (PP_CAVEAT in plan["reasons"]) == (plan["pipeline_parallel"] > 1)
    for label, why in document["rejected"].items():
        if why.startswith("fits, but"):
            assert (PP_CAVEAT_SHORT in why) == ("PP" in label), (label, why)
